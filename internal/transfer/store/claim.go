package store

import "time"

// ClaimGroup is the claimable files of one priority and submitter on a
// link, oldest first, as a store reads them for a claim.
type ClaimGroup struct {
	Priority  int
	Submitter string
	Files     []Candidate
}

// Candidate is a claimable file and its age: a string that sorts as the
// job's submission time (Age makes one from a time).
type Candidate struct {
	Key FileKey
	Age string
}

// Age is t as a Candidate's age: fixed width, so that string order is
// time order.
func Age(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000Z")
}

// ClaimOrder works out the files a claim of up to n takes, in claim
// order (see Store.Claim): groups come highest priority first; fetch
// fills a group's Files with its oldest claimable files, at most max,
// and is called only for the priorities the claim reaches; shares holds
// each submitter's active files on the link and counts the files dealt.
func ClaimOrder(groups []*ClaimGroup, shares map[string]int, n int, fetch func(g *ClaimGroup, max int) error) ([]FileKey, error) {
	var keys []FileKey
	for len(groups) > 0 && len(keys) < n {
		// The groups of the highest priority left, with their oldest files.
		var level []*ClaimGroup
		for len(groups) > 0 && (len(level) == 0 || groups[0].Priority == level[0].Priority) {
			g := groups[0]
			groups = groups[1:]
			if err := fetch(g, n-len(keys)); err != nil {
				return nil, err
			}
			level = append(level, g)
		}
		// Deal them out: the smallest share first, then the oldest file.
		for len(keys) < n {
			var best *ClaimGroup
			for _, g := range level {
				if len(g.Files) == 0 {
					continue
				}
				if best == nil || shares[g.Submitter] < shares[best.Submitter] ||
					shares[g.Submitter] == shares[best.Submitter] && older(g.Files[0], best.Files[0]) {
					best = g
				}
			}
			if best == nil {
				break
			}
			keys = append(keys, best.Files[0].Key)
			best.Files = best.Files[1:]
			shares[best.Submitter]++
		}
	}
	return keys, nil
}

// older reports whether a comes before b in age order.
func older(a, b Candidate) bool {
	if a.Age != b.Age {
		return a.Age < b.Age
	}
	if a.Key.Job != b.Key.Job {
		return a.Key.Job < b.Key.Job
	}
	return a.Key.Index < b.Key.Index
}
