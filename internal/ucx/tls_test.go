package ucx

import "testing"

func TestSharedMemoryOnly(t *testing.T) {
	for tls, want := range map[string]bool{
		"": false, "sm,self": true, "sm": true, " posix , cma ,self": true, "^sysv,self": true,
		"tcp": false, "sm,self,tcp": false, "rc_mlx5,ud_mlx5,self": false, "all": false,
	} {
		if got := SharedMemoryOnly(tls); got != want {
			t.Errorf("SharedMemoryOnly(%q) = %v, want %v", tls, got, want)
		}
	}
}
