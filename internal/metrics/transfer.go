package metrics

import "github.com/prometheus/client_golang/prometheus"

// Transfer are the transfer service's metrics. A link is "source host ->
// destination host", as the API's /api/v1/links names it: as many label
// values as pairs of sites that exchange files.
type Transfer struct {
	Jobs      prometheus.Counter     // jobs submitted (new ones, not resubmissions)
	Attempts  *prometheus.CounterVec // link, result (ok, or the error class)
	Bytes     *prometheus.CounterVec // link, mode (pull, push, stream)
	Active    *prometheus.GaugeVec   // link
	Queued    *prometheus.GaugeVec   // link
	Limit     *prometheus.GaugeVec   // link: the optimizer's limit
	Decisions *prometheus.CounterVec // link, change (up, down, hold)
}

// NewTransfer registers the transfer service's metrics with reg.
func NewTransfer(reg prometheus.Registerer) *Transfer {
	c := prometheus.Labels{"role": "transfer"}
	m := &Transfer{
		Jobs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wanda_transfer_jobs_submitted_total", ConstLabels: c,
			Help: "Jobs submitted (a resubmission of a known id is not counted again).",
		}),
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_transfer_attempts_total", ConstLabels: c,
			Help: "File transfer attempts that ended, by link and result (ok, or the error class: source missing, timeout, ...).",
		}, []string{"link", "result"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_transfer_bytes_total", ConstLabels: c,
			Help: "Bytes moved by ended attempts, by link and mode (pull, push, stream).",
		}, []string{"link", "mode"}),
		Active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wanda_transfer_active", ConstLabels: c,
			Help: "Transfers in progress on a link (all instances sharing the store).",
		}, []string{"link"}),
		Queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wanda_transfer_queued", ConstLabels: c,
			Help: "Files of a link that may start now.",
		}, []string{"link"}),
		Limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "wanda_transfer_link_limit", ConstLabels: c,
			Help: "The optimizer's limit of transfers at once on a link.",
		}, []string{"link"}),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wanda_transfer_optimizer_decisions_total", ConstLabels: c,
			Help: "The optimizer's decisions on a link, by change (up, down, hold); the reasons are in GET /api/v1/links and the log.",
		}, []string{"link", "change"}),
	}
	reg.MustRegister(m.Jobs, m.Attempts, m.Bytes, m.Active, m.Queued, m.Limit, m.Decisions)
	return m
}
