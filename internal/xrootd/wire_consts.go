package xrootd

import "strconv"

// ProtocolVersion is the protocol version spoken (kXR_PROTOCOLVERSION,
// 5.2.0). Clients compare it against the features they want: pgread and
// pgwrite need 5.1.1 (0x511), TLS 5.0.0.
const ProtocolVersion = 0x00000520

// Versions at which features appeared (kXR_PROT*VERSION).
const (
	VersionTLS  = 0x00000500
	VersionPgRW = 0x00000511
	VersionSign = 0x00000310
)

// Server types in the handshake answer (kXR_DataServer, kXR_LBalServer).
const (
	HandshakeDataServer = 1
	HandshakeLBalServer = 0
)

// RequestID is a client request code (XRequestTypes).
type RequestID uint16

// Request codes.
const (
	ReqAuth     RequestID = 3000 // kXR_auth
	ReqQuery    RequestID = 3001 // kXR_query
	ReqChmod    RequestID = 3002 // kXR_chmod
	ReqClose    RequestID = 3003 // kXR_close
	ReqDirlist  RequestID = 3004 // kXR_dirlist
	ReqGPFile   RequestID = 3005 // kXR_gpfile
	ReqProtocol RequestID = 3006 // kXR_protocol
	ReqLogin    RequestID = 3007 // kXR_login
	ReqMkdir    RequestID = 3008 // kXR_mkdir
	ReqMv       RequestID = 3009 // kXR_mv
	ReqOpen     RequestID = 3010 // kXR_open
	ReqPing     RequestID = 3011 // kXR_ping
	ReqChkPoint RequestID = 3012 // kXR_chkpoint
	ReqRead     RequestID = 3013 // kXR_read
	ReqRm       RequestID = 3014 // kXR_rm
	ReqRmdir    RequestID = 3015 // kXR_rmdir
	ReqSync     RequestID = 3016 // kXR_sync
	ReqStat     RequestID = 3017 // kXR_stat
	ReqSet      RequestID = 3018 // kXR_set
	ReqWrite    RequestID = 3019 // kXR_write
	ReqFattr    RequestID = 3020 // kXR_fattr
	ReqPrepare  RequestID = 3021 // kXR_prepare
	ReqStatx    RequestID = 3022 // kXR_statx
	ReqEndsess  RequestID = 3023 // kXR_endsess
	ReqBind     RequestID = 3024 // kXR_bind
	ReqReadV    RequestID = 3025 // kXR_readv
	ReqPgWrite  RequestID = 3026 // kXR_pgwrite
	ReqLocate   RequestID = 3027 // kXR_locate
	ReqTruncate RequestID = 3028 // kXR_truncate
	ReqSigver   RequestID = 3029 // kXR_sigver
	ReqPgRead   RequestID = 3030 // kXR_pgread
	ReqWriteV   RequestID = 3031 // kXR_writev
	ReqClone    RequestID = 3032 // kXR_clone

	reqFirst = ReqAuth
	reqFence = ReqClone + 1
)

var reqNames = [...]string{
	"kXR_auth", "kXR_query", "kXR_chmod", "kXR_close", "kXR_dirlist", "kXR_gpfile",
	"kXR_protocol", "kXR_login", "kXR_mkdir", "kXR_mv", "kXR_open", "kXR_ping",
	"kXR_chkpoint", "kXR_read", "kXR_rm", "kXR_rmdir", "kXR_sync", "kXR_stat",
	"kXR_set", "kXR_write", "kXR_fattr", "kXR_prepare", "kXR_statx", "kXR_endsess",
	"kXR_bind", "kXR_readv", "kXR_pgwrite", "kXR_locate", "kXR_truncate",
	"kXR_sigver", "kXR_pgread", "kXR_writev", "kXR_clone",
}

// Known reports whether r is a request code of the protocol.
func (r RequestID) Known() bool { return r >= reqFirst && r < reqFence }

func (r RequestID) String() string {
	if r.Known() {
		return reqNames[r-reqFirst]
	}
	return "request " + strconv.Itoa(int(r))
}

// Status is a server response status (XResponseType).
type Status uint16

// Response statuses.
const (
	StatusOK       Status = 0    // kXR_ok: final answer
	StatusOKSoFar  Status = 4000 // kXR_oksofar: partial answer, more follows
	StatusAttn     Status = 4001 // kXR_attn: unsolicited
	StatusAuthMore Status = 4002 // kXR_authmore
	StatusError    Status = 4003 // kXR_error
	StatusRedirect Status = 4004 // kXR_redirect
	StatusWait     Status = 4005 // kXR_wait
	StatusWaitResp Status = 4006 // kXR_waitresp
	StatusStatus   Status = 4007 // kXR_status (pgread, pgwrite)
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "kXR_ok"
	case StatusOKSoFar:
		return "kXR_oksofar"
	case StatusAttn:
		return "kXR_attn"
	case StatusAuthMore:
		return "kXR_authmore"
	case StatusError:
		return "kXR_error"
	case StatusRedirect:
		return "kXR_redirect"
	case StatusWait:
		return "kXR_wait"
	case StatusWaitResp:
		return "kXR_waitresp"
	case StatusStatus:
		return "kXR_status"
	}
	return "status " + strconv.Itoa(int(s))
}

// ErrorCode is the code of a kXR_error answer (XErrorCode).
type ErrorCode int32

// Error codes.
const (
	CodeArgInvalid     ErrorCode = 3000 // kXR_ArgInvalid
	CodeArgMissing     ErrorCode = 3001 // kXR_ArgMissing
	CodeArgTooLong     ErrorCode = 3002 // kXR_ArgTooLong
	CodeFileLocked     ErrorCode = 3003 // kXR_FileLocked
	CodeFileNotOpen    ErrorCode = 3004 // kXR_FileNotOpen
	CodeFSError        ErrorCode = 3005 // kXR_FSError
	CodeInvalidRequest ErrorCode = 3006 // kXR_InvalidRequest
	CodeIOError        ErrorCode = 3007 // kXR_IOError
	CodeNoMemory       ErrorCode = 3008 // kXR_NoMemory
	CodeNoSpace        ErrorCode = 3009 // kXR_NoSpace
	CodeNotAuthorized  ErrorCode = 3010 // kXR_NotAuthorized
	CodeNotFound       ErrorCode = 3011 // kXR_NotFound
	CodeServerError    ErrorCode = 3012 // kXR_ServerError
	CodeUnsupported    ErrorCode = 3013 // kXR_Unsupported
	CodeNoServer       ErrorCode = 3014 // kXR_noserver
	CodeNotFile        ErrorCode = 3015 // kXR_NotFile
	CodeIsDirectory    ErrorCode = 3016 // kXR_isDirectory
	CodeCancelled      ErrorCode = 3017 // kXR_Cancelled
	CodeItExists       ErrorCode = 3018 // kXR_ItExists
	CodeChkSumErr      ErrorCode = 3019 // kXR_ChkSumErr
	CodeInProgress     ErrorCode = 3020 // kXR_inProgress
	CodeOverQuota      ErrorCode = 3021 // kXR_overQuota
	CodeSigVerErr      ErrorCode = 3022 // kXR_SigVerErr
	CodeDecryptErr     ErrorCode = 3023 // kXR_DecryptErr
	CodeOverloaded     ErrorCode = 3024 // kXR_Overloaded
	CodeFSReadOnly     ErrorCode = 3025 // kXR_fsReadOnly
	CodeBadPayload     ErrorCode = 3026 // kXR_BadPayload
	CodeAttrNotFound   ErrorCode = 3027 // kXR_AttrNotFound
	CodeTLSRequired    ErrorCode = 3028 // kXR_TLSRequired
	CodeNoReplicas     ErrorCode = 3029 // kXR_noReplicas
	CodeAuthFailed     ErrorCode = 3030 // kXR_AuthFailed
	CodeImpossible     ErrorCode = 3031 // kXR_Impossible
	CodeConflict       ErrorCode = 3032 // kXR_Conflict
	CodeTooManyErrs    ErrorCode = 3033 // kXR_TooManyErrs
	CodeReqTimedOut    ErrorCode = 3034 // kXR_ReqTimedOut
	CodeTimerExpired   ErrorCode = 3035 // kXR_TimerExpired

	codeFirst = CodeArgInvalid
	codeFence = CodeTimerExpired + 1
)

var codeNames = [...]string{
	"kXR_ArgInvalid", "kXR_ArgMissing", "kXR_ArgTooLong", "kXR_FileLocked",
	"kXR_FileNotOpen", "kXR_FSError", "kXR_InvalidRequest", "kXR_IOError",
	"kXR_NoMemory", "kXR_NoSpace", "kXR_NotAuthorized", "kXR_NotFound",
	"kXR_ServerError", "kXR_Unsupported", "kXR_noserver", "kXR_NotFile",
	"kXR_isDirectory", "kXR_Cancelled", "kXR_ItExists", "kXR_ChkSumErr",
	"kXR_inProgress", "kXR_overQuota", "kXR_SigVerErr", "kXR_DecryptErr",
	"kXR_Overloaded", "kXR_fsReadOnly", "kXR_BadPayload", "kXR_AttrNotFound",
	"kXR_TLSRequired", "kXR_noReplicas", "kXR_AuthFailed", "kXR_Impossible",
	"kXR_Conflict", "kXR_TooManyErrs", "kXR_ReqTimedOut", "kXR_TimerExpired",
}

func (c ErrorCode) String() string {
	if c >= codeFirst && c < codeFence {
		return codeNames[c-codeFirst]
	}
	return "error " + strconv.Itoa(int(c))
}

// OpenOptions are the options of kXR_open (XOpenRequestOption). Some bits
// mean something else in kXR_locate (see the Locate* names).
type OpenOptions uint16

// Open options.
const (
	OpenCompress  OpenOptions = 0x0001 // kXR_compress
	OpenDelete    OpenOptions = 0x0002 // kXR_delete: create or truncate
	OpenForce     OpenOptions = 0x0004 // kXR_force
	OpenNew       OpenOptions = 0x0008 // kXR_new: create, fail if it exists
	OpenRead      OpenOptions = 0x0010 // kXR_open_read
	OpenUpdate    OpenOptions = 0x0020 // kXR_open_updt: read-write
	OpenAsync     OpenOptions = 0x0040 // kXR_async
	OpenRefresh   OpenOptions = 0x0080 // kXR_refresh
	OpenMkpath    OpenOptions = 0x0100 // kXR_mkpath: create missing parents
	OpenAppend    OpenOptions = 0x0200 // kXR_open_apnd
	OpenRetstat   OpenOptions = 0x0400 // kXR_retstat: answer with a stat
	OpenReplica   OpenOptions = 0x0800 // kXR_replica
	OpenPOSC      OpenOptions = 0x1000 // kXR_posc: persist on successful close
	OpenNoWait    OpenOptions = 0x2000 // kXR_nowait
	OpenSeqIO     OpenOptions = 0x4000 // kXR_seqio
	OpenWriteOnly OpenOptions = 0x8000 // kXR_open_wrto

	LocateUnique   = OpenCompress // kXR_compress in kXR_locate: unique hosts
	LocateRefresh  = OpenRefresh  // kXR_refresh
	LocatePrefName = OpenMkpath   // kXR_prefname: host names, not addresses
	LocateDirlist  = OpenRetstat  // kXR_4dirlist
	LocateNoWait   = OpenNoWait   // kXR_nowait
)

// OpenOptionsT are kXR_open's second option word (XOpenRequestOption2).
type OpenOptionsT uint16

// Second-word open options.
const (
	OpenDup      OpenOptionsT = 0x0001 // kXR_dup
	OpenSameFS   OpenOptionsT = 0x0002 // kXR_samefs
	OpenRetstatx OpenOptionsT = 0x0004 // kXR_retstatx
	OpenDirectIO OpenOptionsT = 0x0008 // kXR_directio
)

// Mode is a permission word of kXR_open, kXR_mkdir and kXR_chmod
// (XOpenRequestMode); it is not laid out as POSIX mode bits.
type Mode uint16

// Permission bits.
const (
	ModeUR Mode = 0x100
	ModeUW Mode = 0x080
	ModeUX Mode = 0x040
	ModeGR Mode = 0x020
	ModeGW Mode = 0x010
	ModeGX Mode = 0x008
	ModeOR Mode = 0x004
	ModeOW Mode = 0x002
	ModeOX Mode = 0x001
)

// Perm returns the POSIX permission bits of m.
func (m Mode) Perm() uint32 {
	var p uint32
	for i, b := range [...]Mode{ModeOX, ModeOW, ModeOR, ModeGX, ModeGW, ModeGR, ModeUX, ModeUW, ModeUR} {
		if m&b != 0 {
			p |= 1 << i
		}
	}
	return p
}

// ModeFromPerm turns POSIX permission bits into a Mode.
func ModeFromPerm(p uint32) Mode {
	var m Mode
	for i, b := range [...]Mode{ModeOX, ModeOW, ModeOR, ModeGX, ModeGW, ModeGR, ModeUX, ModeUW, ModeUR} {
		if p&(1<<i) != 0 {
			m |= b
		}
	}
	return m
}

// StatFlags are the flags of a stat answer (XStatRespFlags).
type StatFlags int32

// Stat flags.
const (
	StatFile          StatFlags = 0   // kXR_file
	StatXset          StatFlags = 1   // kXR_xset: executable
	StatIsDir         StatFlags = 2   // kXR_isDir
	StatOther         StatFlags = 4   // kXR_other: neither file nor directory
	StatOffline       StatFlags = 8   // kXR_offline
	StatReadable      StatFlags = 16  // kXR_readable
	StatWritable      StatFlags = 32  // kXR_writable
	StatPOSCPending   StatFlags = 64  // kXR_poscpend
	StatBackupExists  StatFlags = 128 // kXR_bkpexist
	StatCacheResponse StatFlags = 512 // kXR_cachersp
)

// StatVFS in a kXR_stat's options asks for file system information
// (kXR_vfs) instead of a file's.
const StatVFS = 1

// Dirlist options (XDirlistRequestOption).
const (
	DirlistOnline = 1 // kXR_online
	DirlistDStat  = 2 // kXR_dstat: a stat line after each name
	DirlistDCksum = 4 // kXR_dcksm: dstat plus a checksum
	DirlistDStatx = 8 // kXR_dstatx
)

// MkdirPath in a kXR_mkdir's options creates missing parents
// (kXR_mkdirpath).
const MkdirPath = 1

// QueryType is the info type of kXR_query (XQueryType).
type QueryType uint16

// Query types.
const (
	QueryStats          QueryType = 1  // kXR_QStats
	QueryPrepare        QueryType = 2  // kXR_QPrep
	QueryChecksum       QueryType = 3  // kXR_Qcksum
	QueryXattr          QueryType = 4  // kXR_Qxattr
	QuerySpace          QueryType = 5  // kXR_Qspace
	QueryChecksumCancel QueryType = 6  // kXR_Qckscan
	QueryConfig         QueryType = 7  // kXR_Qconfig
	QueryVisa           QueryType = 8  // kXR_Qvisa
	QueryFileInfo       QueryType = 9  // kXR_QFinfo
	QueryFSInfo         QueryType = 10 // kXR_QFSinfo
	QueryOpaque         QueryType = 16 // kXR_Qopaque
	QueryOpaqueFile     QueryType = 32 // kXR_Qopaquf
	QueryOpaqueHandle   QueryType = 64 // kXR_Qopaqug
)

// Protocol request flags (ClientProtocolRequest::RequestFlags).
const (
	ProtoSecReqs = 0x01 // kXR_secreqs: return security requirements
	ProtoAbleTLS = 0x02 // kXR_ableTLS: the client can do TLS
	ProtoWantTLS = 0x04 // kXR_wantTLS: switch this connection to TLS
	ProtoBifReqs = 0x08 // kXR_bifreqs
)

// Protocol request expectations (ClientProtocolRequest::ExpectFlags).
const (
	ExpectMask  = 0x0f
	ExpectNone  = 0x00
	ExpectBind  = 0x01
	ExpectGPF   = 0x02
	ExpectLogin = 0x03
	ExpectTPC   = 0x04
	ExpectGPFA  = 0x08
)

// ServerFlags are the flags of a kXR_protocol answer: the server's role,
// what it supports and its TLS requirements.
type ServerFlags uint32

// Server flags.
const (
	FlagIsServer  ServerFlags = 0x00000001 // kXR_isServer: a data server
	FlagIsManager ServerFlags = 0x00000002 // kXR_isManager: a redirector
	FlagCache     ServerFlags = 0x00000080 // kXR_attrCache
	FlagMeta      ServerFlags = 0x00000100 // kXR_attrMeta
	FlagProxy     ServerFlags = 0x00000200 // kXR_attrProxy
	FlagSuper     ServerFlags = 0x00000400 // kXR_attrSuper
	FlagVirtRdr   ServerFlags = 0x00000800 // kXR_attrVirtRdr

	FlagAnonGPF ServerFlags = 0x00800000 // kXR_anongpf
	FlagSupGPF  ServerFlags = 0x00400000 // kXR_supgpf
	FlagSupPgRW ServerFlags = 0x00200000 // kXR_suppgrw: pgread and pgwrite
	FlagSupPOSC ServerFlags = 0x00100000 // kXR_supposc

	FlagHaveTLS  ServerFlags = 0x80000000 // kXR_haveTLS: TLS is configured
	FlagGotoTLS  ServerFlags = 0x40000000 // kXR_gotoTLS: switch now
	FlagTLSAny   ServerFlags = 0x1f000000 // kXR_tlsAny
	FlagTLSData  ServerFlags = 0x01000000 // kXR_tlsData
	FlagTLSGPF   ServerFlags = 0x02000000 // kXR_tlsGPF
	FlagTLSLogin ServerFlags = 0x04000000 // kXR_tlsLogin
	FlagTLSSess  ServerFlags = 0x08000000 // kXR_tlsSess
	FlagTLSTPC   ServerFlags = 0x10000000 // kXR_tlsTPC
	FlagTLSGPFA  ServerFlags = 0x20000000 // kXR_tlsGPFA
)

// Login abilities (XLoginAbility) and capability/version (XLoginCapVer,
// XLoginVersion).
const (
	LoginFullURL   = 1
	LoginMultiPr   = 3
	LoginReadRdOK  = 4
	LoginHasIPv64  = 8
	LoginOnlyPrv4  = 16
	LoginOnlyPrv6  = 32
	LoginLocalFile = 64
	LoginRedirFlag = 128

	LoginVersionMask = 63
	LoginAsyncCap    = 128
	LoginVersion5    = 5 // kXR_ver005: the TLS-capable client
)

// Prepare options (XPrepRequestOption).
const (
	PrepareCancel = 1
	PrepareNotify = 2
	PrepareNoErrs = 4
	PrepareStage  = 8
	PrepareWMode  = 16
	PrepareColoc  = 32
	PrepareFresh  = 64
	PrepareUseTCP = 128
	PrepareEvict  = 0x0001 // in optionX
)

// Attn action codes (XActionCode) still in use.
const (
	AttnAsyncMsg  = 5002 // kXR_asyncms
	AttnAsyncResp = 5008 // kXR_asynresp
)

// Response types inside a kXR_status body (XrdProto::RespType).
const (
	RespFinal    = 0x00 // kXR_FinalResult
	RespPartial  = 0x01 // kXR_PartialResult
	RespProgress = 0x02 // kXR_ProgressInfo
)

// pgread/pgwrite constants (XrdProto).
const (
	PageSize  = 4096         // kXR_pgPageSZ
	PageUnit  = PageSize + 4 // kXR_pgUnitSZ: a page and its CRC32C
	PgMaxEpr  = 128          // kXR_pgMaxEpr: checksum errors per request
	PgMaxEos  = 256          // kXR_pgMaxEos: checksum errors outstanding
	PgRetry   = 0x01         // kXR_pgRetry in reqflags
	PgAnyPath = 0xff         // kXR_AnyPath in pathid
)

// readv limits (XrdProto).
const (
	SegmentLen     = 16                  // rlItemLen: one read_list entry
	MaxReadVList   = 16384               // maxRvecln: bytes of a read list
	MaxReadVSegs   = MaxReadVList / 16   // maxRvecsz: 1024 segments
	MinReadVBuffer = 2097152             // minRVbsz
	MaxReadVData   = MinReadVBuffer - 16 // maxRVdsz: bytes of one segment
	MaxWriteVList  = 16384               // maxWvecln
	MaxWriteVSegs  = MaxWriteVList / 16  // maxWvecsz
)
