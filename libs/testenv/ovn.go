package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// OVN is a real OVN control plane run as local processes: ovsdb-server with the northbound
// database, ovsdb-server with the southbound database, and ovn-northd translating the first into
// logical flows in the second. The binaries come from Debian's packages, fetched without root into
// the builder's cache (libs/builder/ovn.sh). The databases listen on unix sockets in Dir.
type OVN struct {
	// Root is where the packages were unpacked.
	Root string
	// Dir holds the databases, sockets and logs.
	Dir   string
	procs map[string]*Process
	own   bool
}

// OVNRoot fetches OVN into the cache when missing and returns where it was unpacked.
func OVNRoot() (string, error) { return debsRoot("ovn.sh") }

// NodeDebsRoot fetches what a real node takes from Debian (runc, iptables, busybox) into the cache
// when missing and returns where it was unpacked (libs/builder/node-debs.sh).
func NodeDebsRoot() (string, error) { return debsRoot("node-debs.sh") }

// debsRoot runs a script of libs/builder that unpacks Debian packages and returns their root.
func debsRoot(name string) (string, error) {
	script, err := builderScript(name)
	if err != nil {
		return "", err
	}
	cmd := exec.Command("bash", script)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", script, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// builderScript finds a script of libs/builder.
func builderScript(name string) (string, error) { return RepoPath("libs/builder/" + name) }

// RepoPath finds rel (a path from the repository's root): beside this package's source, or, in a
// binary built with -trimpath (localcp in make demo), above the working directory.
func RepoPath(rel string) (string, error) {
	if _, here, _, ok := runtime.Caller(0); ok && filepath.IsAbs(here) {
		return filepath.Join(filepath.Dir(here), "..", "..", rel), nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s not found above the working directory", rel)
		}
		dir = parent
	}
}

// StartOVN starts the NB and SB databases and ovn-northd in dir (a new temporary directory when
// empty: unix socket paths must stay short).
func StartOVN(dir string) (*OVN, error) {
	root, err := OVNRoot()
	if err != nil {
		return nil, err
	}
	o := &OVN{Root: root, Dir: dir, procs: map[string]*Process{}}
	if dir == "" {
		if o.Dir, err = os.MkdirTemp("", "ovn"); err != nil {
			return nil, err
		}
		o.own = true
	}
	for _, db := range []string{"nb", "sb"} {
		schema := filepath.Join(root, "usr", "share", "ovn", "ovn-"+db+".ovsschema")
		if out, err := o.command("ovsdb-tool", "create", filepath.Join(o.Dir, db+".db"), schema).CombinedOutput(); err != nil {
			return nil, errors.Join(fmt.Errorf("ovsdb-tool create %s: %w: %s", db, err, out), o.Stop())
		}
		if err := o.StartDB(db); err != nil {
			return nil, errors.Join(err, o.Stop())
		}
	}
	if err := o.start("northd", "ovn-northd", "--ovnnb-db="+o.NB(), "--ovnsb-db="+o.SB(),
		"--unixctl="+filepath.Join(o.Dir, "northd.ctl"), "--pidfile="+filepath.Join(o.Dir, "northd.pid"),
		"--log-file="+filepath.Join(o.Dir, "northd.log")); err != nil {
		return nil, errors.Join(err, o.Stop())
	}
	return o, nil
}

// NB is the northbound database's address, as libovsdb and ovn-nbctl take it.
func (o *OVN) NB() string { return "unix:" + filepath.Join(o.Dir, "nb.sock") }

// ServeNB makes the northbound database also listen on TCP at ip:port (a node's pods reach the
// machine at its end of their link) and returns that address, as libovsdb takes it.
func (o *OVN) ServeNB(ip net.IP, port int) (string, error) {
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(port))
	if _, err := o.run("ovn-appctl", "-t", filepath.Join(o.Dir, "nb.ctl"), "ovsdb-server/add-remote", "ptcp:"+strconv.Itoa(port)+":"+ip.String()); err != nil {
		return "", err
	}
	return "tcp:" + addr, nil
}

// SB is the southbound database's address.
func (o *OVN) SB() string { return "unix:" + filepath.Join(o.Dir, "sb.sock") }

// StartDB starts (or, after StopDB, restarts on the same file) the "nb" or "sb" ovsdb-server and
// waits until it accepts connections.
func (o *OVN) StartDB(db string) error {
	sock := filepath.Join(o.Dir, db+".sock")
	_ = os.Remove(sock)
	if err := o.start(db, "ovsdb-server", filepath.Join(o.Dir, db+".db"), "--remote=punix:"+sock,
		"--unixctl="+filepath.Join(o.Dir, db+".ctl"), "--pidfile="+filepath.Join(o.Dir, db+".pid"),
		"--log-file="+filepath.Join(o.Dir, db+".log")); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ovsdb-server %s does not listen on %s: %w", db, sock, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// KillDB kills the "nb" or "sb" ovsdb-server at once (SIGKILL), as a crash would: what was
// committed stays in its file.
func (o *OVN) KillDB(db string) error {
	p := o.procs[db]
	if p == nil {
		return fmt.Errorf("%s is not running", db)
	}
	delete(o.procs, db)
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	return p.log.Close()
}

// Nbctl runs ovn-nbctl against the northbound database and returns its output.
func (o *OVN) Nbctl(args ...string) (string, error) {
	return o.run("ovn-nbctl", append([]string{"--db=" + o.NB()}, args...)...)
}

// Sbctl runs ovn-sbctl against the southbound database and returns its output.
func (o *OVN) Sbctl(args ...string) (string, error) {
	return o.run("ovn-sbctl", append([]string{"--db=" + o.SB()}, args...)...)
}

// Trace runs ovn-trace against the southbound database and returns its output.
func (o *OVN) Trace(args ...string) (string, error) {
	return o.run("ovn-trace", append([]string{"--db=" + o.SB()}, args...)...)
}

// Stop stops the processes and removes a directory StartOVN made.
func (o *OVN) Stop() error {
	for _, name := range []string{"northd", "sb", "nb"} {
		if p := o.procs[name]; p != nil {
			p.Stop()
		}
	}
	o.procs = map[string]*Process{}
	if o.own {
		return os.RemoveAll(o.Dir)
	}
	return nil
}

func (o *OVN) run(bin string, args ...string) (string, error) {
	out, err := o.command(bin, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// command prepares one of OVN's programs with its libraries and run directories.
func (o *OVN) command(bin string, args ...string) *exec.Cmd {
	path := filepath.Join(o.Root, "usr", "bin", bin)
	if _, err := os.Stat(path); err != nil {
		path = filepath.Join(o.Root, "usr", "sbin", bin)
	}
	cmd := exec.Command(path, args...)
	lib := filepath.Join(o.Root, "usr", "lib", "x86_64-linux-gnu") + ":" + filepath.Join(o.Root, "lib", "x86_64-linux-gnu")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib,
		"OVS_RUNDIR="+o.Dir, "OVS_LOGDIR="+o.Dir, "OVS_DBDIR="+o.Dir, "OVN_RUNDIR="+o.Dir, "OVN_LOGDIR="+o.Dir,
		"OVS_PKGDATADIR="+filepath.Join(o.Root, "usr", "share", "openvswitch"))
	return cmd
}

func (o *OVN) start(name, bin string, args ...string) error {
	logf, err := os.OpenFile(filepath.Join(o.Dir, name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := o.command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return errors.Join(fmt.Errorf("starting %s: %w", bin, err), logf.Close())
	}
	o.procs[name] = &Process{cmd: cmd, log: logf}
	return nil
}
