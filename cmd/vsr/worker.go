package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/serve"
)

// workerFlags are serveFlags' device, model and NATS settings, and the
// lease of a running task.
type workerFlags struct {
	serveFlags
	ackWait time.Duration
}

func newWorker() *cobra.Command {
	var f workerFlags
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run the tasks of a vsr serve whose tasks are on NATS JetStream (no HTTP)",
		Long: `Run the tasks of a vsr serve whose tasks are on NATS JetStream: take them
from its work queue, restore them on this machine's devices, and write their
states back. Workers join and leave at any time; a worker that dies has its
task taken by another within --ack-wait (see docs/DEPLOY.md).

A task's paths are relative to the service's roots: each worker finds them
under its own --input-root and --output-root (the same shared filesystem may
be mounted elsewhere on each machine), with the same checks as the service;
a task record whose paths leave the roots, or whose model's files differ
from this worker's (a content hash), fails without running. SIGINT or
SIGTERM hands the running task back to the queue at once, without counting
it as an attempt.`,
		Example: `  vsr serve --nats-listen 0.0.0.0:4222 --nats-token-file /etc/vsr/worker-tokens --workers 0 --input-root /mnt/videos --output-root /mnt/results
  vsr worker --nats nats://api-host:4222 --nats-token-file /etc/vsr/nats.token --device cuda:all --input-root /mnt/videos --output-root /mnt/results`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWorker(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.natsURLs, "nats", "", "the NATS server or cluster the service keeps its tasks on (nats://host:4222,...; required)")
	fl.StringVar(&f.natsTokenFile, "nats-token-file", "", "file holding this worker's NATS token (for vsr serve --nats-listen on this machine without a credential: DATA/nats/worker.token)")
	fl.StringVar(&f.natsNkeyFile, "nats-nkey-file", "", "file holding the nkey seed to sign in to NATS with (instead of a token)")
	addNATSTLSFlags(fl, &f.serveFlags)
	fl.StringVar(&f.inputRoot, "input-root", "", "this machine's mount of the service's input root (required)")
	fl.StringVar(&f.outputRoot, "output-root", "", "this machine's mount of the service's output root (required)")
	fl.IntVar(&f.maxAttempts, "max-attempts", 3, "deliveries of a task before it fails (a worker that dies while it runs one costs a delivery)")
	fl.DurationVar(&f.ackWait, "ack-wait", 10*time.Second, "how soon a task of a worker that stopped answering goes to another worker")
	fl.StringSliceVar(&f.models, "model", nil, "model to serve, repeatable, as vsr serve's (default: "+model.DefaultModel()+")")
	fl.IntVar(&f.ranksPerTask, "ranks-per-task", 0, "devices per task with a device list, as vsr serve's")
	fl.Int64Var(&f.maxOutputPixels, "max-output-pixels", serve.DefaultMaxOutputPixels, "largest output frame a task may make, width x height, checked again before each task runs: give the API's vsr serve --max-output-pixels")
	addTaskFlags(fl, &f.base)
	return cmd
}

func runWorker(cmd *cobra.Command, f workerFlags) error {
	if f.natsURLs == "" || f.inputRoot == "" || f.outputRoot == "" {
		return fmt.Errorf("vsr worker needs --nats (the service's NATS server or cluster), --input-root and --output-root (this machine's mounts of the service's roots)")
	}
	if f.maxAttempts < 1 || f.ackWait < 300*time.Millisecond {
		return fmt.Errorf("--max-attempts must be at least 1 and --ack-wait at least 300ms")
	}
	for _, d := range []string{f.inputRoot, f.outputRoot} {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return fmt.Errorf("root %s is not a directory here: mount the service's roots first", d)
		}
	}
	nc, err := natsConfig(f.serveFlags)
	if err != nil {
		return err
	}
	// Reach NATS before loading the models (which may take minutes).
	conn, err := serve.Connect(*nc)
	if err != nil {
		return err
	}
	conn.Close()
	if f.params, err = familyValues(cmd.Flags()); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	run, err := newServeRunner(cmd, f.serveFlags, false)
	if err != nil {
		return err
	}
	defer run.Close()
	data, err := os.MkdirTemp("", "vsr-worker-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(data)
	svc, err := serve.NewWorker(serve.Config{
		Data: data, NATS: nc, InputRoot: f.inputRoot, OutputRoot: f.outputRoot,
		Workers: run.Workers(), MaxAttempts: f.maxAttempts, AckWait: f.ackWait, Logger: log, Version: versionString(),
		Devices: run.Devices(), MaxOutputPixels: f.maxOutputPixels,
	}, run)
	if err != nil {
		return err
	}
	var names []string
	for _, m := range run.Models() {
		names = append(names, m.Model.Name())
	}
	log.Info("vsr worker taking tasks", "nats", svc.NATSURL(), "devices", run.Devices(), "tasks_at_once", run.Workers(),
		"models", strings.Join(names, ","), "input_root", svc.InputRoot(), "output_root", svc.OutputRoot())
	<-cmd.Context().Done()
	log.Info("stopping: the running tasks go back to the queue")
	return svc.Close()
}
