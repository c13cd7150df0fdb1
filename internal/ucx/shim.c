//go:build ucx

#include <stdlib.h>
#include <string.h>

#include "shim.h"
#include "_cgo_export.h"

static void vu_send_cb(void *request, ucs_status_t status, void *user_data)
{
    veloUCXOpDone((uintptr_t)user_data, status);
    ucp_request_free(request);
}

static void vu_get_cb(void *request, ucs_status_t status, void *user_data)
{
    veloUCXOpDone((uintptr_t)user_data, status);
    ucp_request_free(request);
}

static ucs_status_t vu_am_cb(void *arg, const void *header, size_t header_len,
                             void *data, size_t data_len,
                             const ucp_am_recv_param_t *param)
{
    return veloUCXAMRecv((uintptr_t)arg, (void *)header, header_len, data,
                         data_len, param->recv_attr);
}

static void vu_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    veloUCXEpError((uintptr_t)arg, status);
}

/* The caller passes a default only for a key the environment leaves unset:
 * ucp_config_read has read the environment, and a modify overrides it. */
static ucs_status_t vu_default(ucp_config_t *cfg, const char *key,
                               const char *value)
{
    return ucp_config_modify(cfg, key, value);
}

ucs_status_t vu_context_create(const char *tls, const char *net_devices,
                               int set_rcache, ucp_context_h *out)
{
    ucp_config_t *cfg;
    ucp_params_t params;
    ucs_status_t st;

    st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        return st;
    }
    if (set_rcache && (st = vu_default(cfg, "RCACHE_ENABLE", "n")) != UCS_OK) {
        goto out;
    }
    if (tls != NULL && (st = vu_default(cfg, "TLS", tls)) != UCS_OK) {
        goto out;
    }
    if (net_devices != NULL &&
        (st = vu_default(cfg, "NET_DEVICES", net_devices)) != UCS_OK) {
        goto out;
    }

    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    /* ucp_init is a static inline over this entry point. */
    st = ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, cfg, out);
out:
    ucp_config_release(cfg);
    return st;
}

ucs_status_t vu_worker_create(ucp_context_h ctx, ucp_worker_h *out, int *efd,
                              size_t *max_am_header)
{
    ucp_worker_params_t params;
    ucp_worker_attr_t attr;
    ucs_status_t st;

    memset(&params, 0, sizeof(params));
    params.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    params.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(ctx, &params, out);
    if (st != UCS_OK) {
        return st;
    }

    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    st = ucp_worker_query(*out, &attr);
    if (st == UCS_OK) {
        *max_am_header = attr.max_am_header;
        st = ucp_worker_get_efd(*out, efd);
    }
    if (st != UCS_OK) {
        ucp_worker_destroy(*out);
    }
    return st;
}

ucs_status_t vu_worker_address(ucp_worker_h w, void *buf, size_t cap,
                               size_t *len)
{
    ucp_address_t *addr;
    size_t n;
    ucs_status_t st;

    st = ucp_worker_get_address(w, &addr, &n);
    if (st != UCS_OK) {
        return st;
    }
    *len = n;
    if (n <= cap) {
        memcpy(buf, addr, n);
    } else {
        st = UCS_ERR_BUFFER_TOO_SMALL;
    }
    ucp_worker_release_address(w, addr);
    return st;
}

ucs_status_t vu_set_am_handler(ucp_worker_h w, unsigned id, uintptr_t arg,
                               int on)
{
    ucp_am_handler_param_t p;

    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                   UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                   UCP_AM_HANDLER_PARAM_FIELD_CB |
                   UCP_AM_HANDLER_PARAM_FIELD_ARG;
    p.id    = id;
    p.flags = UCP_AM_FLAG_WHOLE_MSG;
    p.cb    = on ? vu_am_cb : NULL;
    p.arg   = (void *)arg;
    return ucp_worker_set_am_recv_handler(w, &p);
}

ucs_status_t vu_ep_create(ucp_worker_h w, const void *addr, uintptr_t arg,
                          int peer_errors, ucp_ep_h *out)
{
    ucp_ep_params_t p;

    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address        = (const ucp_address_t *)addr;
    p.err_mode       = peer_errors ? UCP_ERR_HANDLING_MODE_PEER
                                   : UCP_ERR_HANDLING_MODE_NONE;
    p.err_handler.cb = vu_ep_err_cb;
    p.err_handler.arg = (void *)arg;
    return ucp_ep_create(w, &p, out);
}

/* The three exits of a non-blocking call, folded into a status: UCS_OK is
 * an inline completion (no callback will run), UCS_INPROGRESS a request in
 * *req (its callback runs once), anything else a failure (no callback). */
static ucs_status_t vu_exit(ucs_status_ptr_t p, void **req)
{
    *req = NULL;
    if (p == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(p)) {
        return UCS_PTR_STATUS(p);
    }
    *req = p;
    return UCS_INPROGRESS;
}

ucs_status_t vu_ep_close(ucp_ep_h ep, int force, void **req)
{
    ucp_request_param_t p;

    memset(&p, 0, sizeof(p));
    if (force) {
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags        = UCP_EP_CLOSE_FLAG_FORCE;
    }
    return vu_exit(ucp_ep_close_nbx(ep, &p), req);
}

ucs_status_t vu_am_send(ucp_ep_h ep, unsigned id, const void *header,
                        size_t header_len, const void *data, size_t data_len,
                        uint32_t flags, uintptr_t op, void **req)
{
    ucp_request_param_t p;

    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_FLAGS;
    p.flags     = flags;
    p.cb.send   = vu_send_cb;
    p.user_data = (void *)op;
    return vu_exit(ucp_am_send_nbx(ep, id, header, header_len, data, data_len,
                                   &p),
                   req);
}

ucs_status_t vu_get(ucp_ep_h ep, void *dst, size_t n, uint64_t raddr,
                    ucp_rkey_h rkey, uintptr_t op, void **req)
{
    ucp_request_param_t p;

    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.send   = vu_get_cb;
    p.user_data = (void *)op;
    return vu_exit(ucp_get_nbx(ep, dst, n, raddr, rkey, &p), req);
}

ucs_status_t vu_mem_map(ucp_context_h ctx, void *base, size_t n,
                        ucp_mem_h *out, uintptr_t *eff_base, size_t *eff_len)
{
    ucp_mem_map_params_t p;
    ucp_mem_attr_t attr;
    ucs_status_t st;

    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    p.length     = n;
    if (base != NULL) {
        p.field_mask |= UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
        p.address     = base;
    } else { /* UCX allocates: a memory domain that can share it with a peer */
        p.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        p.flags       = UCP_MEM_MAP_ALLOCATE;
    }
    st = ucp_mem_map(ctx, &p, out);
    if (st != UCS_OK) {
        return st;
    }
    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    st = ucp_mem_query(*out, &attr);
    if (st != UCS_OK) {
        ucp_mem_unmap(ctx, *out);
        return st;
    }
    *eff_base = (uintptr_t)attr.address;
    *eff_len  = attr.length;
    return UCS_OK;
}

ucs_status_t vu_rkey_pack(ucp_context_h ctx, ucp_mem_h mem, void *buf,
                          size_t cap, size_t *len)
{
    void *rkey;
    ucs_status_t st;

    st = ucp_rkey_pack(ctx, mem, &rkey, len);
    if (st != UCS_OK) {
        return st;
    }
    if (*len <= cap) {
        memcpy(buf, rkey, *len);
    } else {
        st = UCS_ERR_BUFFER_TOO_SMALL;
    }
    ucp_rkey_buffer_release(rkey);
    return st;
}

unsigned vu_progress(ucp_worker_h w, unsigned budget)
{
    unsigned total = 0, n;

    while (budget-- > 0 && (n = ucp_worker_progress(w)) != 0) {
        total += n;
    }
    return total;
}

ucs_status_t vu_request_status(void *req)
{
    return ucp_request_check_status(req);
}

void *vu_mem_addr(ucp_mem_h mem)
{
    ucp_mem_attr_t attr;

    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    if (ucp_mem_query(mem, &attr) != UCS_OK) {
        return NULL;
    }
    return attr.address;
}
