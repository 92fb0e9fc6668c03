package metrics

import "github.com/prometheus/client_golang/prometheus"

// Orphans are the metrics of the sweep of orphaned temp files (uploads
// and update copies a killed process left behind).
type Orphans struct {
	Removed      *prometheus.CounterVec // export, kind (upload, dir, checksum)
	RemovedBytes *prometheus.CounterVec // export
	Live         *prometheus.GaugeVec   // export: temp files of live uploads at the last sweep
	Sweeps       *prometheus.CounterVec // result (ok, error)
	LastSweep    prometheus.Gauge       // unix seconds of the last finished sweep
}

// NewOrphans registers the sweep's metric set with reg under the given
// role label.
func NewOrphans(reg prometheus.Registerer, role string) *Orphans {
	c := prometheus.Labels{"role": role}
	m := &Orphans{
		Removed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_orphan_temps_removed_total", ConstLabels: c,
			Help: "Orphaned temp files removed by the sweep, by export and kind (upload: an upload's or update's temp file; dir: a directory set aside by a move; checksum: a sidecar checksum record's temp file).",
		}, []string{"export", "kind"}),
		RemovedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_orphan_temp_bytes_removed_total", ConstLabels: c,
			Help: "Bytes of the orphaned temp files removed by the sweep (set-aside directories not counted).",
		}, []string{"export"}),
		Live: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wanda_upload_temps_live", ConstLabels: c,
			Help: "Temp files held by live uploads (of any process) at the last sweep.",
		}, []string{"export"}),
		Sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_orphan_sweeps_total", ConstLabels: c,
			Help: "Sweeps for orphaned temp files, by result (ok, or error when a directory could not be read or an orphan removed).",
		}, []string{"result"}),
		LastSweep: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wanda_orphan_sweep_last_timestamp_seconds", ConstLabels: c,
			Help: "When the last sweep for orphaned temp files finished (unix seconds).",
		}),
	}
	reg.MustRegister(m.Removed, m.RemovedBytes, m.Live, m.Sweeps, m.LastSweep)
	return m
}
