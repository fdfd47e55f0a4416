package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/vsr-dev/vsr/nvidia"
)

func newDoctor() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Show the NVIDIA driver, GPUs and libraries vsr can use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := nvidia.GetReport(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, r)
			}
			fmt.Fprint(cmd.OutOrStdout(), r.String())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
