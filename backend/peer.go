package backend

// Peer is a capability of backends that copy tensors between two of their
// instances on one host without going through host memory: CUDA peer
// copies between GPUs, a device-to-device copy when both share a GPU. The
// parallel package's transport uses it where both ends have it and
// CanPeer says yes, and stages through the host (Download, Upload)
// otherwise; both give the same values.
//
// A copy is a loan: the sender lends a tensor's current contents (Lend,
// on the sender's goroutine; the sender may free or overwrite its tensor
// right after), the receiver borrows them into a tensor of its own
// (Borrow, on the receiver's goroutine), and the sender takes the loan
// back (Loan.Return, on the sender's goroutine) once the receiver has
// borrowed it. No call waits for the device: the copy is ordered after the
// lender's queued work and before the borrower's later work by events.
type Peer interface {
	Backend
	// CanPeer reports whether this backend can Borrow from other's loans.
	CanPeer(other Backend) bool
	// Lend makes a loan of t's contents.
	Lend(t Tensor) (Loan, error)
	// Borrow copies a loan made by another backend (one CanPeer accepts)
	// into a new tensor of this backend.
	Borrow(l Loan) (Tensor, error)
}

// Loan is a tensor's contents lent to another backend (see Peer).
type Loan interface {
	Shape() Shape
	// Return gives the memory back to the lender once the borrower's copy
	// is queued (it waits for Borrow, or for done to close when the loan
	// will never be borrowed). It is called once, on the lender's
	// goroutine.
	Return(done <-chan struct{})
}
