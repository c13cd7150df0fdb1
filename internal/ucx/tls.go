package ucx

import (
	"os"
	"strings"
)

// SharedMemoryOnly reports whether a UCX_TLS list names only UCX's
// shared-memory and loopback transports. UCX 1.13 has no peer error
// handling on those: an endpoint over them can be created only without
// it (Config.NoPeerErrors), and a lost peer is never detected.
func SharedMemoryOnly(tls string) bool {
	if strings.TrimSpace(tls) == "" {
		return false
	}
	for _, t := range strings.Split(tls, ",") {
		switch strings.TrimPrefix(strings.TrimSpace(t), "^") {
		case "sm", "shm", "self", "mm", "cma", "posix", "sysv", "knem", "xpmem":
		default:
			return false
		}
	}
	return true
}

// EnvSharedMemoryOnly is SharedMemoryOnly of the environment's UCX_TLS,
// which UCX itself reads (and which wins over Config.TLS).
func EnvSharedMemoryOnly() bool { return SharedMemoryOnly(os.Getenv("UCX_TLS")) }
