package fi

import "strconv"

// Class is a fabric object's class (fabric.h's FI_CLASS_*), the fclass of a
// struct fid.
type Class int

// Object classes, numbered as in fabric.h.
const (
	ClassUnspec    Class = iota // FI_CLASS_UNSPEC
	ClassFabric                 // FI_CLASS_FABRIC
	ClassDomain                 // FI_CLASS_DOMAIN
	ClassEP                     // FI_CLASS_EP
	ClassSEP                    // FI_CLASS_SEP
	ClassRxCtx                  // FI_CLASS_RX_CTX
	ClassSrxCtx                 // FI_CLASS_SRX_CTX
	ClassTxCtx                  // FI_CLASS_TX_CTX
	ClassStxCtx                 // FI_CLASS_STX_CTX
	ClassPEP                    // FI_CLASS_PEP
	ClassInterface              // FI_CLASS_INTERFACE
	ClassAV                     // FI_CLASS_AV
	ClassMR                     // FI_CLASS_MR
	ClassEQ                     // FI_CLASS_EQ
	ClassCQ                     // FI_CLASS_CQ
	ClassCntr                   // FI_CLASS_CNTR
	ClassWait                   // FI_CLASS_WAIT
	ClassPoll                   // FI_CLASS_POLL
	ClassConnReq                // FI_CLASS_CONNREQ
	ClassMC                     // FI_CLASS_MC
	ClassNIC                    // FI_CLASS_NIC
	ClassAVSet                  // FI_CLASS_AV_SET
)

var classNames = [...]string{
	"FI_CLASS_UNSPEC", "FI_CLASS_FABRIC", "FI_CLASS_DOMAIN", "FI_CLASS_EP",
	"FI_CLASS_SEP", "FI_CLASS_RX_CTX", "FI_CLASS_SRX_CTX", "FI_CLASS_TX_CTX",
	"FI_CLASS_STX_CTX", "FI_CLASS_PEP", "FI_CLASS_INTERFACE", "FI_CLASS_AV",
	"FI_CLASS_MR", "FI_CLASS_EQ", "FI_CLASS_CQ", "FI_CLASS_CNTR",
	"FI_CLASS_WAIT", "FI_CLASS_POLL", "FI_CLASS_CONNREQ", "FI_CLASS_MC",
	"FI_CLASS_NIC", "FI_CLASS_AV_SET",
}

func (c Class) String() string {
	if c >= 0 && int(c) < len(classNames) {
		return classNames[c]
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// FID is what every fabric object is (struct fid): it says its class and
// carries the context the application gave when opening it. Events and
// completions point back to the object they are about through a FID.
type FID interface {
	Class() Class
	Context() any
}

// FIDBase implements FID; fabric objects embed it.
type FIDBase struct {
	class Class
	ctx   any
}

// NewFIDBase returns a FIDBase of the given class and context.
func NewFIDBase(class Class, ctx any) FIDBase { return FIDBase{class: class, ctx: ctx} }

// Class returns the object's class.
func (b *FIDBase) Class() Class { return b.class }

// Context returns the context given when the object was opened.
func (b *FIDBase) Context() any { return b.ctx }
