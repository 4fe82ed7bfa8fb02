import RemoteCore
import RemoteHost
import struct Synchronization.Atomic

/// One rule of the protocol the checker tries, as the table names it.
struct Rule: Sendable {
    let id: String
    /// What a conforming service does, in a line.
    let text: String

    /// Every rule, in the order of the table (`docs/Protocol.md` is what they come from).
    static let all: [Rule] = [
        Rule(id: "handshake.first", text: "the first packet on fd 3 is a handshake: protocol 1, role service (max_protocol_version: the highest it speaks)"),
        Rule(id: "handshake.identifier", text: "the handshake gives the manifest's identifier, on fd 3 and on each client"),
        Rule(id: "ids.increase", text: "envelope ids increase per direction, on every connection"),
        Rule(id: "ping", text: "a ping is answered with a pong naming it, on fd 3 and on a client"),
        Rule(id: "connect", text: "each socket a remoteview.connect message brings gets a handshake"),
        Rule(id: "clients.several", text: "several clients are served at once"),
        Rule(id: "request.unknown", text: "a request of an unknown type gets a failure (protocol 2: in domain RemoteView, code 1)"),
        Rule(id: "message.unknown", text: "a one-way message of an unknown type is ignored"),
        Rule(id: "cancel.unknown", text: "a cancel of a request that is not outstanding is ignored"),
        Rule(id: "goodbye", text: "a client's goodbye ends that client only"),
        Rule(id: "hostile.version", text: "a handshake of another version is refused: protocol_error VERSION_MISMATCH, then close"),
        Rule(id: "hostile.id-order", text: "an envelope whose id is not above the last is refused: protocol_error MALFORMED, then close"),
        Rule(id: "hostile.unknown-body", text: "an envelope with no known body is refused: protocol_error MALFORMED, then close"),
        Rule(id: "hostile.garbage", text: "a packet that does not decode is refused: protocol_error MALFORMED, then close"),
        Rule(id: "hostile.survived", text: "after each refused client, fd 3 and the other clients still answer"),
        Rule(id: "input.before-size", text: "input before the first resize is taken without a violation"),
        Rule(id: "view.announced", text: "a service with a view announces \"surfaces\" in its handshake (protocol 2)"),
        Rule(id: "view.first-frame", text: "a resize is answered with attach_buffer and a commit"),
        Rule(id: "view.buffer", text: "a buffer is a memfd sealed against shrinking and growing, holding stride × height"),
        Rule(id: "view.buffer-size", text: "each committed buffer has the pixel size of a resize sent (points × scale, rounded)"),
        Rule(id: "view.one-frame-in-flight", text: "no commit before the previous frame's frame_done"),
        Rule(id: "view.frames-increase", text: "frame numbers increase"),
        Rule(id: "view.damage", text: "damage rects lie inside the committed buffer"),
        Rule(id: "view.surface-rules", text: "attach, destroy and the other surface rules"),
        Rule(id: "view.resize-in-flight", text: "a resize sent while a frame is in flight is drawn after that frame_done"),
        Rule(id: "view.settle", text: "remoteview.settle is answered with remoteview.settled (or as an unknown request; protocol 1: any failure)"),
        Rule(id: "state.only-if-announced", text: "restorable_state goes only to a host that announced \"restorable-state\", from a service that announced it"),
        Rule(id: "focus.only-if-announced", text: "focus_leave goes only to a host that announced \"focus-leave\" (to another, Tab wraps around inside the view)"),
        Rule(id: "tree.only-if-announced", text: "accessibility_update goes only to a host that announced \"accessibility\""),
        Rule(id: "tree.arrives", text: "to a host that announced \"accessibility\", a whole tree arrives after the first frame"),
        Rule(id: "tree.bounds", text: "the tree keeps its bounds: at most 4096 nodes, 64 deep, texts of 1024 bytes, one parent each, frames finite and within 16 times the view"),
        Rule(id: "tree.buttons-labelled", text: "every button in the tree has a label"),
        Rule(id: "tree.frames-inside", text: "every node's frame lies inside the view (480×360 points)"),
        Rule(id: "tree.focus-exists", text: "the focus an update names is a node of the tree (checked after Tab moves it)"),
        Rule(id: "state.restore", text: "a restore_state before the first resize (bytes the service never wrote) is taken: the view draws its first frame"),
        Rule(id: "state.bounds", text: "a restorable state holds at most limits.restorableStateKiB; over 16 KiB in a memfd sealed against shrinking, growing and writing, of its declared size"),
        Rule(id: "share.cancel", text: "share_cancel is answered with one share_complete within 2 s"),
        Rule(id: "share.one-complete", text: "nothing of the share family follows share_complete"),
        Rule(id: "exit.fd3", text: "the process exits within 5 s of fd 3 closing"),
        Rule(id: "idle.goodbye", text: "at idle exit, goodbye \"idle exit\" on fd 3 before it closes"),
        Rule(id: "idle.exit", text: "at idle exit, the process exits with status 0"),
    ]
}

/// What the checker found for each rule: passed, failed with what was seen, not tried, or
/// passed under the protocol version in force but broken under a later one (a warning).
final class Report: Sendable {
    enum Verdict: String, Sendable {
        case passed, warning, failed, skipped
    }

    /// The protocol versions of the check: the highest the service speaks (its handshake's
    /// `max_protocol_version`, or 1), the highest the checker offered, and the one in force
    /// (the lower), whose rules the service is judged by.
    struct Versions: Sendable {
        var service: UInt32
        var offered: UInt32
        var inForce: UInt32 { min(service, offered) }
    }

    private let versions = Mutex<Versions?>(nil)
    /// How each run's process ended ("conversation", "idle exit"), in order.
    private let ends = Mutex<[(run: String, reason: TerminationReason?)]>([])
    /// Whether any packet came from the service, on any connection: before one has, a rule
    /// checked on every packet has nothing to hold for.
    private let received = Atomic<Bool>(false)

    /// A packet came from the service.
    func noteReceived() { received.store(true, ordering: .relaxed) }

    /// Whether any packet came from the service.
    var anyReceived: Bool { received.load(ordering: .relaxed) }

    /// How the process of `run` ended (`nil`: it did not end; it was killed by the checker).
    func ended(_ run: String, _ reason: TerminationReason?) {
        ends.withLock { $0.append((run, reason)) }
    }

    /// How each run's process ended, in order.
    var processEnds: [(run: String, reason: TerminationReason?)] { ends.withLock { $0 } }

    /// The service's process ended while it was being checked, for `reason`: each failure that
    /// shows it (a connection closed, a send that found nobody) says how it ended, its signal
    /// or exit code and its last words on stderr.
    func processDied(_ reason: TerminationReason) {
        entries.withLock { entries in
            for (rule, entry) in entries where entry.verdict == .failed
                && Self.deathSymptoms.contains(where: { entry.seen.contains($0) }) && !entry.seen.contains("process had ended") {
                entries[rule]?.seen += "; the service's process had ended: \(reason)"
            }
        }
    }

    /// What a failure caused by the process's death says.
    private static let deathSymptoms = ["closed", "end of file", "cannot send", "no client"]

    /// The versions, once the service's first handshake was read.
    var protocolVersions: Versions? {
        get { versions.withLock { $0 } }
        set { versions.withLock { $0 = newValue } }
    }

    /// `rule` held under the version in force, but `laterRule` of `version` would fail it:
    /// recorded as a warning, not a failure.
    func warn(_ rule: String, wouldFailUnder version: UInt32, _ seen: String) {
        precondition(Rule.all.contains { $0.id == rule }, "no rule \(rule)")
        entries.withLock { entries in
            if entries[rule]?.verdict != .failed { entries[rule] = Entry(verdict: .warning, seen: "would fail under protocol \(version): \(seen)") }
        }
    }

    struct Entry: Sendable {
        var verdict: Verdict
        var seen: String
    }

    private let entries = Mutex<[String: Entry]>([:])

    /// `rule` held (unless it already failed).
    func pass(_ rule: String, _ seen: String = "") {
        precondition(Rule.all.contains { $0.id == rule }, "no rule \(rule)")
        entries.withLock { entries in
            if entries[rule]?.verdict != .failed { entries[rule] = Entry(verdict: .passed, seen: seen) }
        }
    }

    /// `rule` was broken: `seen` says how. The first failure of a rule is the one kept. A
    /// failure that is the transport's id check (an envelope id not above the last) is the id
    /// rule's, whatever was being tried: `rule` is then marked as stopped by it.
    func fail(_ rule: String, _ seen: String) {
        precondition(Rule.all.contains { $0.id == rule }, "no rule \(rule)")
        if rule != Self.idRule, seen.contains("ids must increase per direction") {
            fail(Self.idRule, seen)
            return stopped(rule, by: Self.idRule)
        }
        entries.withLock { entries in
            if entries[rule]?.verdict != .failed { entries[rule] = Entry(verdict: .failed, seen: seen) }
        }
    }

    /// `rule` could not be tried to its end because `other` failed first.
    func stopped(_ rule: String, by other: String) {
        entries.withLock { entries in
            if entries[rule] == nil || entries[rule]?.verdict == .passed {
                entries[rule] = Entry(verdict: .skipped, seen: "not tried to its end: \(other) failed first")
            }
        }
    }

    /// `rule` held, unless something is recorded for it already.
    func passUnlessRecorded(_ rule: String) {
        entries.withLock { entries in
            if entries[rule] == nil { entries[rule] = Entry(verdict: .passed, seen: "") }
        }
    }

    private static let idRule = "ids.increase"

    /// `rule` could not be tried (the service has no view, say); a result already there stays.
    func skip(_ rule: String, _ why: String) {
        entries.withLock { entries in
            if entries[rule] == nil { entries[rule] = Entry(verdict: .skipped, seen: why) }
        }
    }

    /// Records `outcome` under `rule`: `nil` passed, else the failure.
    func record(_ rule: String, _ outcome: String?) {
        if let outcome { fail(rule, outcome) } else { pass(rule) }
    }

    /// Each rule with its verdict, in the table's order (a rule never reached is skipped).
    var rows: [(rule: Rule, entry: Entry)] {
        let entries = self.entries.withLock { $0 }
        return Rule.all.map { ($0, entries[$0.id] ?? Entry(verdict: .skipped, seen: "not reached")) }
    }

    var failed: Bool { rows.contains { $0.entry.verdict == .failed } }
}
