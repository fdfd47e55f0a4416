package torch

import (
	"errors"
	"fmt"
	"strconv"
)

// container runs the opcodes that build tuples, lists and dicts.
func (u *unpickler) container(op byte) error {
	switch op {
	case ')': // EMPTY_TUPLE
		return u.push(Tuple{})
	case 't': // TUPLE
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.push(Tuple(items))
	case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
		n := int(op - 0x84)
		if len(u.stack)-u.frame() < n {
			return errors.New("stack underflow (corrupt pickle)")
		}
		t := Tuple(append([]any(nil), u.stack[len(u.stack)-n:]...))
		u.stack = u.stack[:len(u.stack)-n]
		return u.push(t)
	case ']': // EMPTY_LIST
		return u.push(&List{})
	case 'l': // LIST
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.push(&List{Items: items})
	case '}': // EMPTY_DICT
		return u.push(&Dict{})
	case 'd': // DICT
		items, err := u.popMark()
		if err != nil {
			return err
		}
		d := &Dict{}
		if err := setItems(d, items); err != nil {
			return err
		}
		return u.push(d)
	case 'a', 'e': // APPEND, APPENDS
		return u.appendItems(op)
	}
	return u.setItems(op) // SETITEM, SETITEMS
}

// operands pops what APPEND/SETITEM (one: the top n values) or
// APPENDS/SETITEMS (the values above the mark) add to the container below.
func (u *unpickler) operands(one bool, n int) ([]any, error) {
	if !one {
		return u.popMark()
	}
	if len(u.stack)-u.frame() < n {
		return nil, errors.New("stack underflow (corrupt pickle)")
	}
	items := append([]any(nil), u.stack[len(u.stack)-n:]...)
	u.stack = u.stack[:len(u.stack)-n]
	return items, nil
}

// appendItems runs APPEND and APPENDS, which only a list may receive.
func (u *unpickler) appendItems(op byte) error {
	items, err := u.operands(op == 'a', 1)
	if err != nil {
		return err
	}
	top, err := u.top()
	if err != nil {
		return err
	}
	l, ok := top.(*List)
	if !ok {
		return fmt.Errorf("appending to a %s: only lists may be appended to", typeName(top))
	}
	l.Items = append(l.Items, items...)
	return nil
}

// setItems runs SETITEM and SETITEMS, which only a dict may receive.
func (u *unpickler) setItems(op byte) error {
	items, err := u.operands(op == 's', 2)
	if err != nil {
		return err
	}
	top, err := u.top()
	if err != nil {
		return err
	}
	d, ok := top.(*Dict)
	if !ok {
		return fmt.Errorf("setting items of a %s: only dicts may be", typeName(top))
	}
	return setItems(d, items)
}

// setItems stores alternate keys and values in d.
func setItems(d *Dict, items []any) error {
	if len(items)%2 != 0 {
		return errors.New("a dict's items are not key-value pairs (corrupt pickle)")
	}
	for i := 0; i < len(items); i += 2 {
		if err := d.set(items[i], items[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// memoOp runs the memo opcodes: GET, BINGET, LONG_BINGET, PUT, BINPUT,
// LONG_BINPUT and MEMOIZE.
func (u *unpickler) memoOp(op byte) error {
	var idx int64
	switch op {
	case 'g', 'p':
		line, err := u.line()
		if err != nil {
			return err
		}
		if idx, err = strconv.ParseInt(string(line), 10, 64); err != nil || idx < 0 {
			return fmt.Errorf("bad memo index %q", clip(line))
		}
	case 'h', 'q', 'j', 'r':
		x, err := u.uint(argBytes[op])
		if err != nil {
			return err
		}
		idx = int64(x)
	case 0x94:
		idx = int64(len(u.memo))
	}
	if op == 'g' || op == 'h' || op == 'j' {
		v, ok := u.memo[idx]
		if !ok {
			return fmt.Errorf("memo entry %d was never stored (corrupt pickle)", idx)
		}
		return u.push(v)
	}
	v, err := u.top()
	if err != nil {
		return err
	}
	if _, ok := u.memo[idx]; !ok && len(u.memo) >= maxMemo {
		return fmt.Errorf("the pickle's memo grows past %d entries", maxMemo)
	}
	u.memo[idx] = v
	return nil
}
