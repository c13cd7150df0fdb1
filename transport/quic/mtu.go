package quic

import "log/slog"

// MTU bounds of WithMaxMTU.
const (
	// MaxMTUCeiling is the largest MaxMTU the transport accepts: a larger
	// packet lets a full GSO batch (10 packets) outgrow a UDP datagram,
	// which the reference found loses the batch silently. Larger requests
	// are lowered to it, with a warning.
	MaxMTUCeiling = 6550
	// quicGoMaxPacket is the largest packet quic-go builds (its
	// MaxPacketBufferSize); path MTU discovery stops there.
	quicGoMaxPacket = 1452
	// quicMinPacket is the smallest packet QUIC allows (RFC 9000 §14).
	quicMinPacket = 1200
)

// WithMaxMTU sets the largest UDP payload the transport sends (default:
// quic-go's path MTU discovery, up to 1452 bytes). A request above 6550 is
// lowered to 6550 with a warning, as the reference does. quic-go itself
// never builds a packet above 1452 bytes, so a request above that is
// logged and discovery runs up to 1452: a jumbo-frame network gains
// nothing, and loses nothing either. A request below 1452 turns path MTU
// discovery off and sends packets of that size (at least 1200, QUIC's
// floor).
func WithMaxMTU(bytes int) Option { return func(o *options) { o.maxMTU = bytes } }

// packetSize turns the MaxMTU request into quic-go's settings: the
// initial packet size (0: quic-go's default) and whether path MTU
// discovery runs. It logs each adjustment it makes to the request.
func packetSize(req int, log *slog.Logger) (initial uint16, discover bool) {
	if req <= 0 {
		return 0, true
	}
	if req > MaxMTUCeiling {
		log.Warn("quic: MaxMTU lowered to 6550: a GSO batch of larger packets would exceed a UDP datagram",
			"requested", req, "effective", MaxMTUCeiling)
		req = MaxMTUCeiling
	}
	if req >= quicGoMaxPacket {
		if req > quicGoMaxPacket {
			log.Warn("quic: quic-go sends packets of at most 1452 bytes; MaxMTU above that has no effect",
				"requested", req, "effective", quicGoMaxPacket)
		}
		return 0, true
	}
	if req < quicMinPacket {
		log.Warn("quic: MaxMTU raised to QUIC's minimum packet size", "requested", req, "effective", quicMinPacket)
		req = quicMinPacket
	}
	return uint16(req), false
}
