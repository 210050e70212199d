package host

import (
	"errors"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseMaps(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Mapping
		wantErr bool
	}{
		{
			name: "file and anonymous",
			in: "00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon\n" +
				"7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0 \n" +
				"7f00aa000000-7f00ab000000 r--p 00100000 fd:01 42 /usr/bin/kured-host (deleted)\n",
			want: []Mapping{
				{Start: 0x400000, End: 0x452000, Dev: unix.Mkdev(8, 2), Inode: 173521},
				{Start: 0x7ffd1c000000, End: 0x7ffd1c021000, Writable: true, Dev: 0, Inode: 0},
				{Start: 0x7f00aa000000, End: 0x7f00ab000000, Dev: unix.Mkdev(0xfd, 1), Inode: 42},
			},
		},
		{name: "empty", in: ""},
		{name: "short line", in: "00400000-00452000 r-xp 00000000\n", wantErr: true},
		{name: "no dash", in: "00400000 r-xp 00000000 08:02 1 /x\n", wantErr: true},
		{name: "not hex", in: "0040zz00-00452000 r-xp 00000000 08:02 1 /x\n", wantErr: true},
		{name: "backwards", in: "00452000-00400000 r-xp 00000000 08:02 1 /x\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMaps([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d mappings %+v, want %+v", len(got), got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("mapping %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// TestTrimBinary trims this test binary, on the real kernel: its
// file-backed resident pages must drop, and the process must go on
// (the pages come back from the file when used).
func TestTrimBinary(t *testing.T) {
	_, before, err := Resident()
	if err != nil {
		t.Fatal(err)
	}
	advised, err := TrimBinary()
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EPERM) {
		t.Skipf("this kernel does not page out for this process: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	_, after, err := Resident()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("advised %d MiB of mappings; file-backed resident %d kB -> %d kB", advised>>20, before, after)
	if advised == 0 {
		t.Fatal("no mapping of the executable found")
	}
	if after >= before/2 {
		t.Errorf("file-backed resident memory %d kB -> %d kB, want at least halved", before, after)
	}
}
