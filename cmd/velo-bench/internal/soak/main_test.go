package soak

import (
	"os"
	"os/exec"
	"testing"

	"go.uber.org/goleak"
)

// Started with childEnv set, the test binary is a soak child (the
// end-to-end tests spawn it so); otherwise it runs the tests, and none
// may leave a goroutine behind.
const childEnv = "VELO_SOAK_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := Child(os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString("child: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// testSpawn starts this test binary as a child.
func testSpawn(args []string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	return cmd
}
