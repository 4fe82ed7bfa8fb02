import RemoteCore

/// The life of one ``ServiceConnection`` as a value: which channel (connection to one service
/// process) it uses, whether one is being made and who waits for it, whether it can ever work
/// again, and what it must do next. No process, no socket: the ``ServiceConnection`` holds it
/// under its lock and performs the actions.
///
/// ```
/// idle ──channel needed──▶ connecting ──connected──▶ current(channel)
///   ▲                        │    ▲                    │
///   │◀── connect failed ─────┘    └─ channel unusable ─┤
///   │◀────────────────── channel ended ────────────────┘
/// any ──invalidate──▶ invalidated (announced once no failure is being reported)
/// ```
///
/// Failures are reported as *interrupted* events while they happen; the *invalidated* event
/// waits until none is being reported, so that the crash ending in a crash loop is reported
/// before the loop is.
package struct ServiceConnectionStateMachine<Channel: AnyObject & Sendable>: Sendable {
    /// One caller making a channel, and the callers waiting for it.
    private struct Connecting {
        var waiters = WaiterQueue<Void>()
        /// The connection's channel: the unusable one being replaced (its end may still be
        /// reported), then the one made, which serves once the attempt ends.
        var channel: Channel?
    }

    private enum State {
        /// No channel: the next use makes one.
        case idle
        /// A channel is being made (and, once made, told what a new process must know).
        case connecting(Connecting)
        /// The channel in use (it may be ending: the next use then makes another).
        case current(Channel)
        /// It can never work again; `announced` once the event went out. `waiters` wait for a
        /// connect attempt that was under way, and go when it ends.
        case invalidated(RemoteError, announced: Bool, waiters: WaiterQueue<Void>)
        /// Only while an event changes the state.
        case modifying
    }

    private var state = State.idle
    /// Failures being reported right now: connect attempts and channel ends.
    private var reporting = 0
    /// Whether only the first channel may be made (a share's connection: its activity runs
    /// once, for its items): a caller that would need another is refused.
    private var singleChannel = false
    /// Whether a channel has been made.
    private var madeChannel = false

    package init() {}

    // MARK: actions

    /// What a caller that needs a channel does next.
    package enum NextStep {
        case use(Channel)
        case fail(RemoteError)
        /// Another caller connects: await this waiter (queued for that attempt), then ask again.
        case wait(Waiter<Void>)
        /// Connect, then report with ``connected(_:)`` (when a channel was made) and, in any
        /// case, ``connectEnded()``.
        case connect
        /// The one channel allowed has been made and is gone (``allowOneChannel()``): fail,
        /// saying why no other is made.
        case refused
    }

    /// What a made channel leads to.
    package enum ConnectedAction {
        /// It is the connection's channel: run it.
        case run
        /// The connection was invalidated meanwhile: close the channel, fail with this.
        case refuse(RemoteError)
    }

    /// What ``invalidate(_:)`` leads to.
    package enum InvalidateAction {
        /// Invalidated already.
        case none
        /// Close `channel` (when there is one); announce the invalidation now when `announce`
        /// (otherwise it is announced once the failures being reported are).
        case invalidated(channel: Channel?, announce: Bool)
    }

    // MARK: events

    /// A caller needs a channel; `isUsable` says whether the current one still serves.
    package mutating func channelNeeded(isUsable: (Channel) -> Bool) -> NextStep {
        switch state {
        case .invalidated(let error, _, _):
            return .fail(error)
        case .current(let channel):
            if isUsable(channel) { return .use(channel) }
            if singleChannel && madeChannel { return .refused }
            state = .connecting(Connecting(channel: channel))
            reporting += 1
            return .connect
        case .idle:
            if singleChannel && madeChannel { return .refused }
            state = .connecting(Connecting())
            reporting += 1
            return .connect
        case .connecting(var connecting):
            state = .modifying
            let waiter = Waiter<Void>()
            connecting.waiters.append(waiter)
            state = .connecting(connecting)
            return .wait(waiter)
        case .modifying:
            preconditionFailure("ServiceConnectionStateMachine.channelNeeded() while modifying")
        }
    }

    /// Only one channel is ever made (a share's connection): once it has been, a caller that
    /// would need another is ``NextStep/refused``. The first channel serves while it lasts.
    package mutating func allowOneChannel() {
        singleChannel = true
    }

    /// A caller waiting for another's connect gave up.
    package mutating func abandon(_ waiter: Waiter<Void>) {
        switch state {
        case .connecting(var connecting):
            state = .modifying
            connecting.waiters.remove(waiter)
            state = .connecting(connecting)
        case .invalidated(let error, let announced, var waiters):
            state = .modifying
            waiters.remove(waiter)
            state = .invalidated(error, announced: announced, waiters: waiters)
        case .idle, .current:
            break
        case .modifying:
            preconditionFailure("ServiceConnectionStateMachine.abandon() while modifying")
        }
    }

    /// The connecting caller made `channel` (not running yet).
    package mutating func connected(_ channel: Channel) -> ConnectedAction {
        switch state {
        case .connecting(var connecting):
            state = .modifying
            connecting.channel = channel
            state = .connecting(connecting)
            madeChannel = true
            return .run
        case .invalidated(let error, _, _):
            return .refuse(error)
        case .idle, .current, .modifying:
            preconditionFailure("a channel was made in state \(phase)")
        }
    }

    /// The connect attempt ended (with a channel or not). Returns the waiters to let go, and
    /// the invalidation to announce now, if any.
    package mutating func connectEnded() -> (waiters: [Waiter<Void>], announce: RemoteError?) {
        let waiters: [Waiter<Void>]
        switch state {
        case .connecting(var connecting):
            waiters = connecting.waiters.takeAll()
            state = connecting.channel.map { .current($0) } ?? .idle
        case .invalidated(let error, let announced, var queued):
            waiters = queued.takeAll()
            state = .invalidated(error, announced: announced, waiters: WaiterQueue())
        case .idle, .current, .modifying:
            preconditionFailure("a connect attempt ended in state \(phase)")
        }
        precondition(reporting > 0, "connectEnded() without a connect")
        reporting -= 1
        return (waiters, announceIfDue())
    }

    /// A channel's connection ended. Returns whether its end is news to report (it was the
    /// connection's channel, which was not invalidated): report it, then call ``reportEnded()``.
    package mutating func channelEnded(_ channel: Channel) -> Bool {
        switch state {
        case .current(let current) where current === channel:
            state = .idle
        case .connecting(var connecting) where connecting.channel === channel:
            state = .modifying
            connecting.channel = nil
            state = .connecting(connecting)
        default:
            return false
        }
        reporting += 1
        return true
    }

    /// A failure has been reported. Returns the invalidation to announce now, if any.
    package mutating func reportEnded() -> RemoteError? {
        precondition(reporting > 0, "reportEnded() without a report")
        reporting -= 1
        return announceIfDue()
    }

    /// The connection can never work again.
    package mutating func invalidate(_ error: RemoteError) -> InvalidateAction {
        let channel: Channel?
        var waiters = WaiterQueue<Void>()
        switch state {
        case .invalidated:
            return .none
        case .idle:
            channel = nil
        case .current(let current):
            channel = current
        case .connecting(let connecting):
            // The connecting caller sees the invalidation when its channel is made, and the
            // waiters go when its attempt ends.
            channel = connecting.channel
            waiters = connecting.waiters
        case .modifying:
            preconditionFailure("ServiceConnectionStateMachine.invalidate() while modifying")
        }
        let announce = reporting == 0
        state = .invalidated(error, announced: announce, waiters: waiters)
        return .invalidated(channel: channel, announce: announce)
    }

    private mutating func announceIfDue() -> RemoteError? {
        guard reporting == 0, case .invalidated(let error, announced: false, let waiters) = state else { return nil }
        state = .invalidated(error, announced: true, waiters: waiters)
        return error
    }

    // MARK: queries

    /// The connection's channel, if any (it may be ending, or not serve yet).
    package var channel: Channel? {
        switch state {
        case .current(let channel): channel
        case .connecting(let connecting): connecting.channel
        case .idle, .invalidated: nil
        case .modifying: preconditionFailure("ServiceConnectionStateMachine.channel while modifying")
        }
    }

    /// Why the connection can never work again, once it cannot.
    package var invalidation: RemoteError? {
        if case .invalidated(let error, _, _) = state { error } else { nil }
    }

    /// `idle`, `connecting`, `current`, `invalidated`, for messages and tests.
    package var phase: String {
        switch state {
        case .idle: "idle"
        case .connecting: "connecting"
        case .current: "current"
        case .invalidated(_, let announced, _): announced ? "invalidated (announced)" : "invalidated"
        case .modifying: "modifying"
        }
    }
}
