package host

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Start-up touches the code and type data of nearly every package linked
// in (client-go registers every Kubernetes API type, kubectl's drain
// again), and the kernel maps each touched page with its neighbours (64
// KiB fault-around, read-around on a cold cache). Idle, the daemon uses a
// small part of that. TrimBinary asks the kernel to reclaim the pages of
// the binary's own mappings now (MADV_PAGEOUT, Linux 5.4), rather than on
// its next memory shortage: they are clean and are read again from the
// file if the daemon needs them (at the next drain, say). Android's
// process compaction does the same to idle apps.

// Mapping is one line of /proc/PID/maps: an address range, whether it is
// writable, and the file it maps (device and inode; inode 0 is anonymous
// memory).
type Mapping struct {
	Start, End uintptr
	Writable   bool
	Dev        uint64 // as unix.Mkdev(major, minor)
	Inode      uint64
}

// ParseMaps reads the mappings of /proc/PID/maps.
func ParseMaps(data []byte) ([]Mapping, error) {
	var out []Mapping
	s := bufio.NewScanner(bytes.NewReader(data))
	s.Buffer(make([]byte, 0, 4096), 1<<20)
	for s.Scan() {
		// 00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/dbus-daemon
		f := strings.Fields(s.Text())
		if len(f) < 5 {
			return nil, fmt.Errorf("maps line %q: too few fields", s.Text())
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		major, minor, ok2 := strings.Cut(f[3], ":")
		if !ok || !ok2 {
			return nil, fmt.Errorf("maps line %q: bad range or device", s.Text())
		}
		var m Mapping
		var v [5]uint64
		for i, t := range []struct {
			s    string
			base int
		}{{lo, 16}, {hi, 16}, {major, 16}, {minor, 16}, {f[4], 10}} {
			n, err := strconv.ParseUint(t.s, t.base, 64)
			if err != nil {
				return nil, fmt.Errorf("maps line %q: %w", s.Text(), err)
			}
			v[i] = n
		}
		m.Start, m.End = uintptr(v[0]), uintptr(v[1])
		m.Writable = strings.HasPrefix(f[1], "rw")
		m.Dev, m.Inode = unix.Mkdev(uint32(v[2]), uint32(v[3])), v[4]
		if m.End < m.Start {
			return nil, fmt.Errorf("maps line %q: range ends before it starts", s.Text())
		}
		out = append(out, m)
	}
	return out, s.Err()
}

// TrimBinary asks the kernel to reclaim the resident pages of this
// process's executable file that are mapped read-only, and returns the
// bytes of mappings it advised.
// A kernel without MADV_PAGEOUT (EINVAL) or that refuses it (EPERM: not
// the file's owner, nor root) makes an error; nothing is lost either way.
func TrimBinary() (int64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		return 0, fmt.Errorf("trim binary pages: %w", err)
	}
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("trim binary pages: %w", err)
	}
	maps, err := ParseMaps(data)
	if err != nil {
		return 0, fmt.Errorf("trim binary pages: %w", err)
	}
	var advised int64
	for _, m := range maps {
		// Only the read-only mappings (code, constants, type data): the
		// written pages of the data segment are the runtime's variables,
		// which would go to swap and come straight back.
		if m.Inode != st.Ino || m.Dev != st.Dev || m.Writable {
			continue
		}
		// The raw call: the range is not Go memory, so no []byte for
		// unix.Madvise to take.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.Start, m.End-m.Start, unix.MADV_PAGEOUT); errno != 0 {
			return advised, fmt.Errorf("trim binary pages: madvise %#x-%#x: %w", m.Start, m.End, syscall.Errno(errno))
		}
		advised += int64(m.End - m.Start)
	}
	return advised, nil
}

// Resident reads the resident set of this process from /proc/self/status,
// in kB: anonymous and file-backed.
func Resident() (anon, file int64, err error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	field := func(name string) (int64, error) {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			}
		}
		return 0, fmt.Errorf("no %s in /proc/self/status", name)
	}
	if anon, err = field("RssAnon"); err != nil {
		return 0, 0, err
	}
	file, err = field("RssFile")
	return anon, file, err
}
