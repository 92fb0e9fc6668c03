package cli

import (
	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/config"
)

// monitorFlags are the flags of the monitoring outside wanda, the same on
// the server, cache and redirector roles (config: monitoring.*,
// docs/monitoring.md).
type monitorFlags struct {
	udp, report []string
}

func (m *monitorFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVar(&m.udp, "monitor-udp", nil, "send XRootD's detailed monitoring streams (user logins, the file stream, redirections; what monitoring.xrootd says) to this HOST:PORT over UDP, as xrootd.monitor does (repeatable; monitoring.xrootd.destinations)")
	f.StringArrayVar(&m.report, "report-udp", nil, "send XRootD's summary stream (xrd.report's <statistics>) to this HOST:PORT over UDP every monitoring.xrootd.report_interval (repeatable; monitoring.xrootd.report)")
}

// apply sets the flags that were given over c.
func (m *monitorFlags) apply(cmd *cobra.Command, c *config.Monitoring) {
	if cmd.Flags().Changed("monitor-udp") {
		c.XRootD.Destinations = m.udp
	}
	if cmd.Flags().Changed("report-udp") {
		c.XRootD.Report = m.report
	}
}
