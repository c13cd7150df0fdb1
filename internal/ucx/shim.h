//go:build ucx

// The C side of the binding: every UCX call whose parameters hold a union
// or a callback is made here, so the Go side passes only scalars, opaque
// handles and pinned buffers. Callbacks carry integer ids (never Go
// pointers) and call back into Go through the exported trampolines.
#ifndef VELO_UCX_SHIM_H
#define VELO_UCX_SHIM_H

#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

ucs_status_t vu_context_create(const char *tls, const char *net_devices,
                               int set_rcache, ucp_context_h *out);
ucs_status_t vu_worker_create(ucp_context_h ctx, ucp_worker_h *out, int *efd,
                              size_t *max_am_header);
ucs_status_t vu_worker_address(ucp_worker_h w, void *buf, size_t cap,
                               size_t *len);
ucs_status_t vu_set_am_handler(ucp_worker_h w, unsigned id, uintptr_t arg,
                               int on);
ucs_status_t vu_ep_create(ucp_worker_h w, const void *addr, uintptr_t arg,
                          int peer_errors, ucp_ep_h *out);
ucs_status_t vu_ep_close(ucp_ep_h ep, int force, void **req);
ucs_status_t vu_am_send(ucp_ep_h ep, unsigned id, const void *header,
                        size_t header_len, const void *data, size_t data_len,
                        uint32_t flags, uintptr_t op, void **req);
ucs_status_t vu_get(ucp_ep_h ep, void *dst, size_t n, uint64_t raddr,
                    ucp_rkey_h rkey, uintptr_t op, void **req);
void *vu_mem_addr(ucp_mem_h mem);
ucs_status_t vu_mem_map(ucp_context_h ctx, void *base, size_t n,
                        ucp_mem_h *out, uintptr_t *eff_base, size_t *eff_len);
ucs_status_t vu_rkey_pack(ucp_context_h ctx, ucp_mem_h mem, void *buf,
                          size_t cap, size_t *len);
unsigned vu_progress(ucp_worker_h w, unsigned budget);
ucs_status_t vu_request_status(void *req);

#endif
