package swiftvr

import (
	"context"
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/parallel"
)

// Shard places a DiT forward pass on one rank of a sequence-parallel group
// (Ulysses, as SGLang-Diffusion runs Wan): the chunk's T x H x W token
// sequence is cut into Size() equal slices of whole tokens, padded with at
// most Size()-1 zero tokens at the end (never whole frames), and rank r
// holds slice r outside attention. Around each self-attention an
// all-to-all trades the token split for a split by heads (each rank then
// holds every token of Heads/Size() heads, so the shifted windows and
// their owner rule see the whole chunk), and a second one trades back.
// RMSNorm and RoPE run before the exchange on whole rows, RoPE with the
// slice's first token as its position origin; the cross-attention to the
// fixed prompt needs no exchange. At the end the ranks gather the output
// so that every rank holds the whole of v.
type Shard struct {
	parallel.Group
	Ctx  context.Context
	sent int // collectives so far, naming each in its tag
}

// slice returns the tokens each rank holds for a sequence of n tokens.
func (sh *Shard) slice(n int) int { return (n + sh.Size() - 1) / sh.Size() }

func (sh *Shard) tag(what string) string {
	sh.sent++
	return fmt.Sprintf("dit %s %d", what, sh.sent)
}

// exchange runs an all-to-all of parts (freed, as is what arrives).
func (sh *Shard) exchange(what string, parts []backend.Tensor, use func(got []backend.Tensor) error) error {
	defer freeAll(parts)
	got, err := sh.AllToAll(sh.Ctx, sh.tag(what), parts)
	if err != nil {
		return err
	}
	defer func() {
		for i, t := range got {
			if i != sh.Me {
				t.Free()
			}
		}
	}()
	return use(got)
}

func freeAll(ts []backend.Tensor) {
	for _, t := range ts {
		if t != nil {
			t.Free()
		}
	}
}

// assemble stacks the first rows of slices (one per rank, per rows each)
// into an n-row matrix, leaving out the padding past token n.
func (m *DiT) assemble(slices []backend.Tensor, per, n int) (backend.Tensor, error) {
	out, err := m.b.Empty(backend.Matrix(n, slices[0].Shape().C))
	if err != nil {
		return nil, err
	}
	for i, p := range slices {
		rows := min(per, n-i*per)
		if rows <= 0 {
			break
		}
		err := func() error {
			dst, err := m.t.Rows(out, i*per, rows)
			if err != nil {
				return err
			}
			defer dst.Free()
			src, err := m.t.Rows(p, 0, rows)
			if err != nil {
				return err
			}
			defer src.Free()
			return m.b.CopyFrames(dst, 0, src)
		}()
		if err != nil {
			out.Free()
			return nil, err
		}
	}
	return out, nil
}

// toHeads turns x (this rank's tokens x every head) into every one of the
// n tokens x this rank's heads.
func (m *DiT) toHeads(sh *Shard, x backend.Tensor, n int) (backend.Tensor, error) {
	p := sh.Size()
	c := x.Shape().C / p
	parts := make([]backend.Tensor, p)
	for j := range parts {
		var err error
		if parts[j], err = m.b.Channels(x, j*c, c); err != nil {
			freeAll(parts)
			return nil, err
		}
	}
	var out backend.Tensor
	err := sh.exchange("to heads", parts, func(got []backend.Tensor) (err error) {
		out, err = m.assemble(got, x.Shape().W, n)
		return err
	})
	return out, err
}

// toTokens turns y (every one of the n tokens x this rank's heads) into
// this rank's per tokens x every head.
func (m *DiT) toTokens(sh *Shard, y backend.Tensor, per int) (backend.Tensor, error) {
	p := sh.Size()
	padded, err := m.b.CropPad(y, 1, p*per) // zero rows for the padding tokens
	if err != nil {
		return nil, err
	}
	defer padded.Free()
	parts := make([]backend.Tensor, p)
	for i := range parts {
		if parts[i], err = m.t.Rows(padded, i*per, per); err != nil {
			freeAll(parts)
			return nil, err
		}
	}
	c := y.Shape().C
	out, err := m.b.Empty(backend.Matrix(per, p*c))
	if err != nil {
		freeAll(parts)
		return nil, err
	}
	err = sh.exchange("to tokens", parts, func(got []backend.Tensor) error {
		for j, g := range got {
			if err := m.b.CopyChannels(out, j*c, g); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		out.Free()
		return nil, err
	}
	return out, nil
}

// gather returns the n rows of the whole sequence from every rank's
// slice y.
func (m *DiT) gather(sh *Shard, y backend.Tensor, n int) (backend.Tensor, error) {
	return allGather(sh.Ctx, sh.Group, sh.tag("gather"), y, func(got []backend.Tensor) (backend.Tensor, error) {
		return m.assemble(got, y.Shape().W, n)
	})
}

// allGather returns join of every rank of g's t (in group order), freeing
// what the others sent.
func allGather(ctx context.Context, g parallel.Group, tag string, t backend.Tensor, join func([]backend.Tensor) (backend.Tensor, error)) (backend.Tensor, error) {
	got, err := g.AllGather(ctx, tag, t)
	if err != nil {
		return nil, err
	}
	defer func() {
		for i, p := range got {
			if i != g.Me {
				p.Free()
			}
		}
	}()
	return join(got)
}
