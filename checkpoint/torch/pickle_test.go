package torch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/internal/pthtest"
)

// TestPlainValues: the same plain values pickled by Python with protocols
// 0 to 5 load as Python's own structure (handmade-values.json).
func TestPlainValues(t *testing.T) {
	b, err := os.ReadFile(fixture(t, "handmade-values.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	for proto := range 6 {
		t.Run(fmt.Sprint("protocol", proto), func(t *testing.T) {
			data, err := os.ReadFile(fixture(t, fmt.Sprintf("handmade-values-p%d.pkl", proto)))
			if err != nil {
				t.Fatal(err)
			}
			v, err := loads(data)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(canon(v))
			var g any
			json.Unmarshal(got, &g)
			if !reflect.DeepEqual(g, want) {
				t.Errorf("got  %s\nwant %s", got, b)
			}
		})
	}
}

// TestRefusals: every global outside the allow-list, every call of a value
// that is not an allow-listed callable and the extension registry are
// refused with ErrRefused, naming what was refused.
func TestRefusals(t *testing.T) {
	for _, tc := range []struct{ name, pickle, want string }{
		{"posix.system", glob("posix", "system") + uni("touch x") + "\x85R.", "refusing posix.system"},
		{"os.system", glob("os", "system") + uni("touch x") + "\x85R.", "refusing os.system"},
		{"nt.system", glob("nt", "system") + uni("x") + "\x85R.", "refusing nt.system"},
		{"builtins.eval", glob("builtins", "eval") + uni("1") + "\x85R.", "refusing builtins.eval"},
		{"builtins.exec", glob("builtins", "exec") + uni("1") + "\x85R.", "refusing builtins.exec"},
		{"__builtin__.eval", glob("__builtin__", "eval") + uni("1") + "\x85R.", "refusing __builtin__.eval"},
		{"getattr", glob("builtins", "getattr") + glob("collections", "OrderedDict") + uni("fromkeys") + "\x86R.", "refusing builtins.getattr"},
		{"subprocess.Popen", glob("subprocess", "Popen") + "]\x85R.", "refusing subprocess.Popen"},
		{"STACK_GLOBAL", "\x80\x04\x8c\x05posix\x8c\x06system\x93" + uni("x") + "\x85R.", "refusing posix.system"},
		{"STACK_GLOBAL odd name", "\x80\x04\x8c\x03a\nb\x8c\x01c\x93.", `refusing "a\nb".c`},
		{"INST", "(" + uni("x") + "iposix\nsystem\n.", "refusing posix.system"},
		{"INST allowed class", "(" + uni("x") + "itorch\nFloatStorage\n.", "refusing to call torch.FloatStorage"},
		{"OBJ", "(" + glob("torch", "FloatStorage") + "o.", "refusing to call torch.FloatStorage"},
		{"NEWOBJ", glob("torch", "HalfStorage") + ")\x81.", "refusing to call torch.HalfStorage"},
		{"call a dtype", glob("torch", "float32") + ")R.", "refusing to call a torch.dtype"},
		{"call a string", uni("posix.system") + ")R.", "refusing to call a str"},
		{"torch module", glob("torch", "load") + ".", "refusing torch.load"},
		{"torch.nn module", glob("torch.nn.modules.conv", "Conv2d") + ".", "refusing torch.nn.modules.conv.Conv2d"},
		{"numpy", glob("numpy.core.multiarray", "_reconstruct") + ".", "refusing numpy.core.multiarray._reconstruct"},
		{"rebuild_from_type", glob("torch._tensor", "_rebuild_from_type_v2") + ".", "refusing torch._tensor._rebuild_from_type_v2"},
		{"BUILD on a dict", "}}b.", "refusing to set the state of a dict"},
		{"BUILD on a list", "]}b.", "refusing to set the state of a list"},
		{"EXT1", "\x80\x02\x82\x01)R.", "refusing extension-registry code 1 (EXT1)"},
		{"EXT2", "\x80\x02\x83\x01\x02)R.", "refusing extension-registry code 513 (EXT2)"},
		{"EXT4", "\x80\x02\x84\x01\x00\x00\x00)R.", "refusing extension-registry code 1 (EXT4)"},
		// refused when named: what follows is never parsed
		{"refused before the rest", glob("posix", "system") + "\xff\xff", "refusing posix.system"},
		{"nested in a tensor", glob("torch._utils", "_rebuild_tensor_v2") + "(" + pid("0", 2) +
			glob("posix", "system") + uni("x") + "\x85R" + "(K\x02t(K\x01t\x89" + glob("collections", "OrderedDict") + ")RtR.",
			"refusing posix.system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loads([]byte(tc.pickle))
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("error %v does not wrap ErrRefused", err)
			}
			pthtest.CheckOneLine(t, err, "", tc.want, ErrRefused.Error())
		})
	}
}

// TestMaliciousFixtures: the payloads scripts/handmade_pth.py verified to
// create their marker file when Python unpickles them are refused, and the
// marker never appears.
func TestMaliciousFixtures(t *testing.T) {
	names := map[string]string{
		"system": "posix.system", "eval": "builtins.eval", "exec": "builtins.exec",
		"getattr": "builtins.getattr", "popen": "subprocess.Popen", "nested": "posix.system",
		"ext1": "extension-registry code 240", "legacy": "posix.system",
	}
	paths := map[string]string{}
	for name := range names {
		paths[name] = fixture(t, "handmade-evil-"+name+".pth")
	}
	t.Chdir(t.TempDir()) // where a payload would create pwned-<name>
	for name, want := range names {
		t.Run(name, func(t *testing.T) {
			_, err := Load(paths[name])
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("error %v does not wrap ErrRefused", err)
			}
			pthtest.CheckOneLine(t, err, paths[name], "refusing "+want)
			if _, err := os.Stat("pwned-" + name); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("marker pwned-%s exists (or cannot be checked: %v): the payload ran", name, err)
			}
		})
	}
}

// TestAllowed: the allow-listed calls build what torch's would.
func TestAllowed(t *testing.T) {
	t.Run("OrderedDict with _metadata", func(t *testing.T) {
		p := glob("collections", "OrderedDict") + ")R" + uni("a") + "K\x01s" +
			"}" + uni("_metadata") + glob("collections", "OrderedDict") + ")R" + "sb."
		v, err := loads([]byte(p))
		if err != nil {
			t.Fatal(err)
		}
		d := v.(*Dict)
		if !d.Ordered || d.Len() != 1 {
			t.Fatalf("got %#v", d)
		}
	})
	t.Run("rebuild_tensor_v3 of an untyped storage", func(t *testing.T) {
		untyped := "(" + uni("storage") + glob("torch.storage", "UntypedStorage") + uni("0") + uni("cpu") + intOp(12) + "tQ"
		p := glob("torch._utils", "_rebuild_tensor_v3") + "(" + untyped + intOp(1) + "(K\x02K\x02t(K\x02K\x01t\x89" +
			glob("collections", "OrderedDict") + ")R" + glob("torch", "float16") + "tR."
		v, err := loads([]byte(p))
		if err != nil {
			t.Fatal(err)
		}
		if tn := v.(*Tensor); tn.DType != F16 || fmt.Sprint(tn.Shape) != "[2 2]" || len(tn.Data) != 8 {
			t.Errorf("tensor %v %v %d bytes", tn.DType, tn.Shape, len(tn.Data))
		}
		// 12 bytes hold 6 halves: offset 3 and 2x2 reaches the 7th
		p = strings.Replace(p, intOp(1), intOp(3), 1)
		_, err = loads([]byte(p))
		pthtest.CheckOneLine(t, err, "", "reaches past its storage of 6 elements")
	})
	t.Run("parameter and Size", func(t *testing.T) {
		p := "(" + glob("torch._utils", "_rebuild_parameter") + "(" + tensorOp("0", 6, 0, []int{2, 3}, []int{3, 1}) +
			"\x88" + glob("collections", "OrderedDict") + ")RtR" +
			glob("torch", "Size") + "(K\x02K\x03t\x85R" + glob("_codecs", "encode") + uni("\u00ff") + uni("latin1") + "\x86R" +
			glob("torch", "bfloat16") + "t."
		v, err := loads([]byte(p))
		if err != nil {
			t.Fatal(err)
		}
		tup := v.(Tuple)
		tn := tup[0].(*Tensor)
		if tn.DType != F32 || fmt.Sprint(tn.Shape) != "[2 3]" || len(tn.Data) != 24 {
			t.Errorf("tensor %v %v %d bytes", tn.DType, tn.Shape, len(tn.Data))
		}
		if fmt.Sprint(tup[1]) != "[2 3]" || !bytes.Equal(tup[2].([]byte), []byte{0xff}) || tup[3] != BF16 {
			t.Errorf("got %v", tup[1:])
		}
	})
}

// TestTensorChecks: offsets, sizes and strides are checked against the
// storage's declared size before any data is touched.
func TestTensorChecks(t *testing.T) {
	for _, tc := range []struct {
		name         string
		numel, off   int
		size, stride []int
		want         string
	}{
		{"past the end", 6, 1, []int{2, 3}, []int{3, 1}, "reaches past its storage"},
		{"offset outside", 6, 7, []int{}, []int{}, "offset 7 is outside"},
		{"negative offset", 6, -1, []int{1}, []int{1}, "offset -1 is outside"},
		{"negative size", 6, 0, []int{-1}, []int{1}, "negative or too large"},
		{"negative stride", 6, 0, []int{2}, []int{-1}, "negative or too large"},
		{"huge size", 6, 0, []int{1 << 30, 1 << 30}, []int{1, 1}, "more elements than its storage"},
		{"huge stride", 6, 0, []int{2}, []int{1 << 30}, "reaches past"},
		{"rank mismatch", 6, 0, []int{2, 3}, []int{1}, "2 sizes but 1 strides"},
		{"scalar past the end", 6, 6, []int{}, []int{}, "outside its storage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loads([]byte(tensorOp("0", tc.numel, tc.off, tc.size, tc.stride) + "."))
			pthtest.CheckOneLine(t, err, "", tc.want)
		})
	}
	// Empty and stride-0 views within bounds are fine.
	for _, ok := range []string{
		tensorOp("0", 0, 0, []int{0, 3}, []int{3, 1}),
		tensorOp("0", 6, 6, []int{0}, []int{1}),
		tensorOp("0", 6, 5, []int{1, 1}, []int{100, 100}),
		tensorOp("0", 6, 0, []int{3, 2}, []int{0, 1}),
	} {
		if _, err := loads([]byte(ok + ".")); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

// TestMalformed: corrupt pickles are one-line errors, and bounds hold.
func TestMalformed(t *testing.T) {
	for _, tc := range []struct{ name, pickle, want string }{
		{"empty", "", "ends early"},
		{"no STOP", "N", "ends early"},
		{"underflow", "R", "stack underflow"},
		{"stop on empty", ".", "stack underflow"},
		{"unknown opcode", "\xff", "unknown opcode 0xff"},
		{"protocol 6", "\x80\x06N.", "protocol 6"},
		{"long string", "X\xff\xff\xff\x7fab", "ends early"},
		{"huge LONG4", "\x8b\x00\x00\x10\x00" + strings.Repeat("\x00", 1<<20) + ".", "too large"},
		{"memo miss", "h\x05.", "memo entry 5 was never stored"},
		{"no mark", "t.", "no MARK"},
		{"odd dict", "(K\x01d.", "not key-value pairs"},
		{"unhashable key", "}]K\x01s.", "dict key of type list"},
		{"long key", "}" + uni(strings.Repeat("k", maxKeyLen+1)) + "K\x01s.", "longer than 1024"},
		{"append to dict", "}K\x01a.", "only lists"},
		{"setitem on list", "]K\x01K\x02s.", "only dicts"},
		{"set", "\x8f.", "sets are not supported"},
		{"buffer", "\x97.", "out-of-band buffers"},
		{"text pid", "Pfoo\n.", "persistent id \"foo\" is not a torch.save storage"},
		{"pid wrong type", "(" + uni("storage") + uni("x") + uni("0") + uni("cpu") + "K\x01tQ.", "not a storage class"},
		{"pid negative", "(" + uni("storage") + glob("torch", "FloatStorage") + uni("0") + uni("cpu") + intOp(-1) + "tQ.", "element count -1"},
		{"bad STRING", "Sabc\n.", "not quoted"},
		{"stack bound", strings.Repeat("N", maxStack+1) + ".", "stack grows past"},
		{"OrderedDict with args", glob("collections", "OrderedDict") + "(]t" + "R.", "with arguments"},
		{"tensor of a str", glob("torch._utils", "_rebuild_tensor_v2") + "(" + uni("x") + "K\x00)))\x89}tR.", "not a storage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loads([]byte(tc.pickle))
			pthtest.CheckOneLine(t, err, "", tc.want)
		})
	}
}

// TestCallBudget: the memo cannot make a small pickle allocate without
// bound by repeating a call on one large argument, and a tensor's rank is
// bounded.
func TestCallBudget(t *testing.T) {
	big := strings.Repeat("a", 100_000)
	p := "]" + glob("_codecs", "encode") + "q\x01" + uni(big) + uni("latin1") + "\x86q\x02Ra" +
		strings.Repeat("h\x01h\x02Ra", 100) + "."
	_, err := loads([]byte(p))
	pthtest.CheckOneLine(t, err, "", "the pickle's calls build more than")
	if _, err := loads([]byte("]" + glob("_codecs", "encode") + uni(big) + uni("latin1") + "\x86Ra.")); err != nil {
		t.Errorf("one call: %v", err)
	}

	ones := make([]int, maxRank+1)
	for i := range ones {
		ones[i] = 1
	}
	_, err = loads([]byte(tensorOp("0", 6, 0, ones, ones) + "."))
	pthtest.CheckOneLine(t, err, "", "65 dimensions (at most 64)")
}
