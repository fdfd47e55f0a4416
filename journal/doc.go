// Package journal records how far the restoration of one output has got, so
// that a run stopped by a crash, a kill or a reboot can continue where it
// stopped instead of starting again from frame 0 (issue 38).
//
// # What a journal holds
//
// A [Journal] belongs to one output. It names the input it was made from
// (an [Identity]: size, modification time, SHA-256 of the first and of the
// last MiB, and the caller's probe digest), the model and every setting that
// changes the output ([Settings], reduced to a digest that does not depend on
// the order of the settings), the number of frames of the whole output, the
// parts finished so far (each a file with its first frame, frame count, size
// and SHA-256), and, for models that carry state from frame to frame, a
// reference to the state saved at a checkpoint. A run may resume only when
// [Compare] finds the journal's input and settings equal to its own; otherwise
// the journal is set aside, and Compare says in one line why.
//
// # Where it lives
//
// A [Store] is a directory: vsr's hidden private directory beside the target,
// which the caller chooses, creates and removes. The store reaches it only
// through an [os.Root], so no name in a journal and no symbolic link planted
// in the directory can make the store read or write outside it; the store
// also refuses symbolic links in place of its own files and of the part and
// state files a journal lists (they read as missing). Part and state files
// are written by the caller into the same directory; the journal names them
// by their base name.
//
// # On-disk format
//
// The directory holds
//
//	journal.json       the last checkpoint
//	journal.prev.json  the checkpoint before it
//	journal.json.tmp-* a checkpoint being written (left only by a crash)
//
// Each journal file is one JSON object, an envelope around the record:
//
//	{"format":"vsr-journal","sha256":"<hex>","body":{...}}\n
//
// where body is the [Journal] encoded by encoding/json exactly as written and
// sha256 is the SHA-256 of those body bytes. [Store.Save] writes a new
// checkpoint to a temporary file, syncs it, moves a verified journal.json to
// journal.prev.json, renames the temporary file to journal.json and syncs the
// directory; a failure at any step (a full disk, say) returns an error and
// leaves the last good checkpoint readable. [Store.Load] takes journal.json
// if its envelope, checksum, version and record are valid, else
// journal.prev.json, and then checks the parts in order: the first part whose
// file is missing, not a regular file, of another size or (when asked) of
// another hash ends the journal, which keeps only the parts before it.
//
// A Store is not safe for concurrent use; one run owns an output's journal
// (the caller's lock on the output ensures that).
package journal
