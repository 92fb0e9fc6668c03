package wan

import "testing"

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1000", 1000},
		{"1Gbit", 1e9},
		{"100Mbit", 100e6},
		{"100mbit", 100e6},
		{"10G", 10e9},
		{"2.5Gbit/s", 2.5e9},
		{"500kbit", 500e3},
		{"500Kbit", 500e3},
		{"1Mb/s", 1e6},
		{"1Mibit", 1 << 20},
		{"125MB/s", 1e9},
		{" 1 Gbit ", 1e9},
		{"1Tbit", 1e12},
		{"1Gbps", 1e9},
		{"10gbps", 10e9},
		{"1GBps", 8e9},
	} {
		got, err := ParseRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "fast", "10 MB", "1GiB", "-1Gbit", "1Xbit", "1.2.3G", "G", "1e9", "99999999999Tbit"} {
		if got, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"100", 100},
		{"100B", 100},
		{"4MiB", 4 << 20},
		{"512KiB", 512 << 10},
		{"512Ki", 512 << 10},
		{"64k", 64 << 10},
		{"64K", 64 << 10},
		{"4M", 4 << 20},
		{"1G", 1 << 30},
		{"1GiB", 1 << 30},
		{"1GB", 1e9},
		{"1kB", 1e3},
		{"1KB", 1e3},
		{"1.5MiB", 3 << 19},
		{"2TB", 2e12},
	} {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "big", "4MiBs", "4 MiB/s", "-1", "1XB", "1bit", "KiB", "9999999999TiB"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1Gbit", "4MiB", "125MB/s", "0", "1.5k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := ParseRate(s); err == nil && n < 0 {
			t.Errorf("ParseRate(%q) = %d", s, n)
		}
		if n, err := ParseSize(s); err == nil && n < 0 {
			t.Errorf("ParseSize(%q) = %d", s, n)
		}
	})
}
