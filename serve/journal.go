package serve

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/vsr-dev/vsr/pipeline"
)

// A task's run keeps a journal beside its output (Task.Resume): the
// pipeline's journal directory of the hidden result the runner writes
// (pipeline.JournalDir of resultTemp), in the output's directory, which
// the run opened inside the output root (openTask): a link swapped in for
// a directory on the way cannot move the journal out of the root, and the
// pipeline refuses a journal that is not a private directory (a link put
// at its name).
//
// The journal lives while its task may run again: a run interrupted by a
// crash, a shutdown or a worker's death leaves it to the next attempt,
// here or on any worker that sees the same output root. The service
// removes it once the task is over (completed: the pipeline does;
// cancelled, failed or given up: removeJournal), and the sweep of
// temporaries at start keeps those of the tasks that are not over
// (liveJournals). Two runs of a task never hold it at once: each holds
// the output's lock (lockOutput), and the pipeline locks the journal.

// restartNote is a task's resume note when its run starts from frame 0
// although an earlier run was interrupted and this one keeps a journal:
// that run's journal is not where this one looks.
const restartNote = "restarted from frame 0: no journal of the interrupted run beside the output (workers on several machines resume only where they share the output root)"

// journalName is the name of output's journal in output's directory.
func journalName(output string) string {
	return filepath.Base(pipeline.JournalDir(resultTemp(output)))
}

// hasJournal reports whether output's journal is in dir, output's
// directory opened in the output root.
func hasJournal(dir *os.Root, output string) bool {
	_, err := dir.Lstat(journalName(output))
	return err == nil
}

// removeJournal removes output's journal from dir, output's directory
// opened in the output root, unless a run holds it (the pipeline's lock).
func removeJournal(dir *os.Root, output string, log *slog.Logger) {
	name := journalName(output)
	f, err := dir.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil {
		err = tryFlock(f)
		if err == errNoFlock {
			err = nil
		}
		if err == nil {
			err = dir.RemoveAll(name) // while locked: no run starts on it meanwhile
		}
		f.Close()
	}
	if err != nil {
		log.Warn("removing the journal of a task that is over", "output", output, "err", err)
		return
	}
	log.Info("removed the journal of a task that is over", "output", output)
}

// dropJournal removes the journal of a task over that does not run here
// (a pending task cancelled, one interrupted too often) whose output is
// output, in the output root root.
func (s *scheduler) dropJournal(root, output string) {
	dir, f, err := openDirIn(root, filepath.Dir(output))
	if err != nil {
		return
	}
	defer dir.Close()
	defer f.Close()
	removeJournal(dir, output, s.log)
}

// liveJournals are the paths of the journals of the tasks that are not
// over (in s.tasks): the sweep of temporaries keeps them.
func (s *scheduler) liveJournals() map[string]bool {
	keep := map[string]bool{}
	for _, t := range s.tasks {
		if !t.Status.Final() {
			keep[filepath.Join(filepath.Dir(t.Output), journalName(t.Output))] = true
		}
	}
	return keep
}
