// Package backend defines the interface that model code computes through,
// the optional capabilities a backend may add to it, and the registry that
// picks an implementation by device name.
//
// Tensors are dense NHWC arrays (batch, height, width, channels) owned by one
// backend. Model packages never see how a backend stores them: they build
// weights once with Upload and PrepareConv and then call the ops below. The
// CPU implementation lives in backend/cpu; GPU implementations add packages
// beside it without touching model code. Implementations share their
// argument checks, output shapes and resize taps through
// backend/internal/check, which model code cannot import.
//
// Backends register under a device kind (Register) and are opened from a
// configuration string such as "cuda:0?dtype=bf16" (Open).
//
// # The core: Backend
//
// Backend is what every device implements: tensors in and out (Upload,
// Download, Empty, FromRGB8, FromRGB16, ToRGB8, ToRGB16), convolutions
// (PrepareConv, Conv2D, Conv2DAdd), elementwise ops (Activate, Binary,
// AddScaled), layout (PixelShuffle, PixelUnshuffle, Resize, CropPad,
// Channels, CopyChannels, Band, CopyBand) and the ops between the frames
// of a video tensor (Frames, ConcatFrames, CopyFrames, ConcatPrev,
// FoldFrames, UnfoldFrames). The compact models (ncnn graphs) need nothing
// more. Frames in pixel formats other than RGB24 and RGB48 go through
// FromFrames and ToFrames, built on these ops.
//
// # Growing a backend
//
// A new backend embeds NotImplemented, which answers every op of Backend
// with an error wrapping ErrNotImplemented and naming the op and the
// device, and replaces the ops one at a time: it compiles, registers and
// runs from the first op, and a model reaching an op not yet written fails
// with a clear error. NotImplemented gives no capability: a backend has a
// capability once it implements all of its methods, and until then callers
// take the capability's fallback below.
//
// # Fused ops
//
// Some ops stand for a sequence of plain ops, in one pass where a backend
// can; each says which sequence, and a backend without its own kernel may
// compute it so:
//
//   - Conv2DAdd(x, w, p, act, res) is Activate(Binary(OpAdd,
//     Conv2D(x, w, p, ActNone), res), act), bias included in the Conv2D.
//   - SliceConver.SliceConv(x, w, p, act, y, at) is CopyChannels(y, at,
//     Conv2D(Channels(x, 0, w.In()), w, p, act)).
//   - ShuffleAdder.ShuffleAddNearest(x, base, r, order) is Binary(OpAdd,
//     PixelShuffle(x, r, order), Resize(base, Nearest, H*r, W*r, Tile{},
//     Tile{})), exactly.
//   - BilinearShuffleAdder.ShuffleAddBilinear(x, base, r, order) is the
//     same with a bilinear Resize (and PixelShuffle's result as float32
//     for a float32 base), exactly.
//   - Transformer.Linear with an accumulator adds x Wᵀ + b to it in place;
//     RMSNormRoPE is an RMS norm and then RoPE, in place;
//     AttentionWeights is an RMS norm of the queries and a softmax over
//     fixed keys (see each).
//   - FP8.LayerNormFP8 is LayerNorm with its output quantised for the next
//     fp8 Linear.
//
// # Capabilities
//
// Beyond Backend, a backend may implement the interfaces below. Callers
// test for them at run time (a type assertion, or the helper named), and
// each entry says what happens where a backend lacks it.
//
//   - Streaming: NewSlot stages batches of frames in memory suited to
//     transfers and converts them on the device, the copies overlapping
//     compute. Absent: NewSlot gives a host Slot whose Input and Put convert
//     at once, through FromFrames and ToFrames.
//   - GPU: the device's identity, storage type and memory (UUID,
//     DeviceName, StorageType, PeakBytes, Available, Spans). Absent: the
//     device is a CPU to its callers: no GPU memory or busy time is
//     reported, memory-bound choices (SwiftVR's height bands) take their
//     defaults, and values are float32 (4 bytes).
//   - UNet: Pad (zeros or reflection, and crops, per side), ChannelMean
//     (global average pooling) and ScaleChannels (per-channel gates): the
//     ops of Real-CUGAN's U-Nets. Absent: graphs with those layers are
//     refused, naming the op.
//   - Norm: GroupNorm (with a residual added in the same pass) and
//     ChannelNorm, with a scale and shift per channel (RealPLKSR). Absent: graphs with those layers are refused,
//     naming the op.
//   - Stored: DownloadStored and UploadStored, a tensor's bytes in the
//     storage type (SwiftVR's saved states). Absent: Download and Upload
//     in float32, with the same values.
//   - Owner: Owns tells the backend's tensors from others'. Absent: models
//     skip that check, and an op given another backend's tensor fails on
//     its own.
//   - SliceConver: SliceConv, a convolution from a channel prefix into a
//     channel slice (see Fused ops). Absent, or CanSliceConv false:
//     model/compact keeps a dense block's concatenations as copies.
//   - ShuffleAdder: ShuffleAddNearest, the fused tail of SRVGGNetCompact
//     (see Fused ops). Absent: the three ops it stands for.
//   - BilinearShuffleAdder: ShuffleAddBilinear, the fused tail of
//     CDA-VSR (see Fused ops). Absent: the ops it stands for.
//   - Motion: the ops of models aligned by motion vectors (CDA-VSR): warp,
//     deformable sampling, gate, block matching, mean absolute values.
//     Absent: CDA-VSR refuses the device, naming the CPU, which has them.
//   - Transformer: the ops of transformer layers (SwiftVR's DiT). Absent:
//     the DiT refuses the device.
//   - FP8: linear layers in e4m3. Absent: SwiftVR's fp8 precision is
//     refused with a message to use bf16.
//   - Recorder: records the ops a function queues and replays them (CUDA
//     graphs). Absent: the ops run each time, with the same results.
//   - Peer: copies between two instances on one host without host memory.
//     Absent (or CanPeer false): the parallel transport stages through the
//     host with Download and Upload, with the same values.
//   - Wide, and WideSlot for its Slots: float32 tensors beside a narrower
//     storage type. Absent (WideOf returns nil, as on the CPU and on a GPU
//     in f32): every tensor is of the storage type, and a model that keeps
//     its inputs, outputs and state in float32 (CDA-VSR) keeps them in
//     that. Wide changes the type rules of the ops it names (see Wide, and
//     the "Wide:" notes on those ops).
//   - Trimmer: Trim drops buffers kept for reuse between jobs. Absent:
//     nothing is dropped.
package backend
