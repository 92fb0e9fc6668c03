package xrdmon

import "fmt"

// Packet is a decoded monitoring packet: its header and, by its code,
// one of the bodies.
type Packet struct {
	Header
	Map   *Map     // '=', 'd', 'i', 'p', 'u', 'U', 'x'
	File  *FStream // 'f'
	Trace []Trace  // 't'
	Redir *RStream // 'r'
	G     *GStream // 'g'
}

// Parse decodes one UDP packet of a detailed monitoring stream. It
// checks the header's length against the packet's and every record's
// size against what is left, so it never reads past p.
func Parse(p []byte) (*Packet, error) {
	h, err := DecodeHeader(p)
	if err != nil {
		return nil, err
	}
	pk := &Packet{Header: h}
	body := p[HeaderLen:]
	switch h.Code {
	case CodeIdent, CodePath, CodeInfo, CodePurge, CodeUser, CodeUserEA, CodeXfer:
		pk.Map, err = decodeMap(body)
	case CodeFStream:
		pk.File, err = decodeFStream(body)
	case CodeTrace:
		pk.Trace, err = decodeTrace(body)
	case CodeRedir:
		pk.Redir, err = decodeRStream(body)
	case CodeGStream:
		pk.G, err = decodeGStream(body)
	default:
		return nil, fmt.Errorf("xrdmon: unknown packet code %q", h.Code)
	}
	if err != nil {
		return nil, fmt.Errorf("xrdmon: %q packet: %w", h.Code, err)
	}
	return pk, nil
}
