package reliable

import "testing"

func TestBufPoolClasses(t *testing.T) {
	prev := 0
	for c := 0; c < numClasses; c++ {
		s := classSize(c)
		if s <= prev || classOf(s) != c || classOf(prev+1) != c {
			t.Fatalf("class %d: size %d (previous %d), classOf(size) %d, classOf(prev+1) %d", c, s, prev, classOf(s), classOf(prev+1))
		}
		if c > 0 && s*2 > prev*3 {
			t.Fatalf("class %d: %d is more than 1.5x %d", c, s, prev)
		}
		prev = s
	}
	if classSize(numClasses-1) < 65536 {
		t.Fatalf("largest class %d below a 64 KiB datagram", classSize(numClasses-1))
	}
}

func TestBufPoolLimit(t *testing.T) {
	p := newBufPool(1000, 1<<20)
	a, ok := p.get(500) // class 512
	if !ok || len(a) != 512 {
		t.Fatalf("get 500: %d %v", len(a), ok)
	}
	if _, ok := p.get(500); ok || p.fits(500) {
		t.Fatal("second 512-byte buffer exceeds the 1000-byte limit")
	}
	b, ok := p.get(380) // class 512 is over; 384 fits
	if !ok || len(b) != 384 || p.inUse != 896 {
		t.Fatalf("get 380: %d %v in use %d", len(b), ok, p.inUse)
	}
	p.put(a)
	if p.inUse != 384 || p.idle != 512 {
		t.Fatalf("after put: in use %d idle %d", p.inUse, p.idle)
	}
	if c, ok := p.get(450); !ok || &c[0] != &a[0] {
		t.Fatal("idle buffer of the class not reused")
	}
}

func TestBufPoolIdleCap(t *testing.T) {
	p := newBufPool(0, 256) // 4 buffers of 64 kept anyway, no more
	var bs [][]byte
	for range 10 {
		b, _ := p.get(64)
		bs = append(bs, b)
	}
	for _, b := range bs {
		p.put(b)
	}
	if len(p.free[0]) != poolMinIdle || p.idle != poolMinIdle*64 || p.inUse != 0 {
		t.Fatalf("kept %d idle (%d bytes), in use %d", len(p.free[0]), p.idle, p.inUse)
	}
}

func TestBufPoolDoesNotAllocate(t *testing.T) {
	p := newBufPool(1<<20, 1<<20)
	for _, n := range []int{64, 100, 1500, 9000} {
		b, _ := p.get(n)
		p.put(b)
	}
	if n := testing.AllocsPerRun(1000, func() {
		for _, n := range []int{64, 100, 1500, 9000} {
			b, _ := p.get(n)
			p.put(b)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per warm get/put round", n)
	}
}
