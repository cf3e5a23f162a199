package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// BuildProgram builds the main package pkg (relative to dir) into out with the flags `make demo` and
// `make release` build with (CGO_ENABLED=0 -trimpath), so that it reuses their compilation of every
// package whatever flags the test binary itself was built with (-race, say).
func BuildProgram(ctx context.Context, dir, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// Process is a helper binary run beside the control plane, logging to a file.
type Process struct {
	cmd *exec.Cmd
	log *os.File
}

// StartProcess runs name from the builder's bin directory with a kubeconfig for an admin user in
// $KUBECONFIG, logging to <logDir>/<name>.log; Stop stops it.
func (e *Env) StartProcess(name, logDir string, env []string, args ...string) error {
	bin, err := BinDir()
	if err != nil {
		return err
	}
	return e.StartBinary(filepath.Join(bin, name), logDir, env, args...)
}

// StartBinary runs the program at path as StartProcess does (a controller of this repository
// built by the test, say), logging to <logDir>/<its base name>.log.
func (e *Env) StartBinary(path, logDir string, env []string, args ...string) error {
	name := filepath.Base(path)
	kubeconfig, err := e.AdminKubeconfig(name, logDir)
	if err != nil {
		return err
	}
	p, err := StartLogged(path, filepath.Join(logDir, name+".log"), append([]string{"KUBECONFIG=" + kubeconfig}, env...), args...)
	if err != nil {
		return err
	}
	e.procs = append(e.procs, p)
	return nil
}

// StartLogged runs path with args and env (beside the test's own), appending its output to
// logPath; it dies with the test.
func StartLogged(path, logPath string, env []string, args ...string) (*Process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("starting %s: %w", filepath.Base(path), err), logf.Close())
	}
	return &Process{cmd: cmd, log: logf}, nil
}

// AdminKubeconfig writes a kubeconfig for a new system:masters user to <dir>/<name>.kubeconfig.
func (e *Env) AdminKubeconfig(name, dir string) (string, error) {
	user, err := e.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	raw, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := kubeconfigPath(dir, name)
	return path, os.WriteFile(path, raw, 0o600)
}

// kubeconfigPath is where AdminKubeconfig (and so StartProcess) writes name's kubeconfig.
func kubeconfigPath(dir, name string) string { return filepath.Join(dir, name+".kubeconfig") }

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop stops the process: SIGTERM, and SIGKILL ten seconds later.
func (p *Process) Stop() {
	if p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	_ = p.log.Close()
}
