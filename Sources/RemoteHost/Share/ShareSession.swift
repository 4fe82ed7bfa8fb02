import Dispatch
import RemoteCore

/// One running share: the activity's process, its embedded view, the updates it streams and
/// the outcome it ends with. Made by ``ShareSheet/perform(_:launcher:presentation:cancelGrace:)``.
///
/// ```swift
/// let session = try await sheet.perform(activity, launcher: launcher)
/// try await session.view.present(width: 480, height: 320)
/// for await update in session.updates { progressBar.value = update.progress }
/// switch try await session.outcome(timeout: .seconds(60)) {
/// case .completed(let items): save(items)
/// case .cancelled, .failed, .interrupted: break
/// }
/// await session.close()
/// ```
///
/// The session sits on its ``ServiceConnection`` and ``RemoteView`` as a listener, like the
/// view sits on the connection: neither knows about shares. It checks every share message
/// against the protocol's rules and ends a service that breaks one. If the process ends before
/// it answers, the outcome is ``ShareOutcome/interrupted(_:)`` with how it ended, and ``view``
/// keeps the last frame it drew, for the app to show greyed out.
///
/// The view and the connection belong to the share: once the share has ended (completed,
/// cancelled, failed or interrupted), nothing on them launches the activity again. While its
/// process still runs they work as before; after it has gone, ``RemoteView/present(width:height:scalePermille:)``,
/// ``RemoteView/settle(timeout:)``, input and requests throw a `RemoteError` with code
/// `shareEnded`, naming the share and how it ended, ``RemoteView/framePresented()`` does
/// nothing, and ``RemoteView/image`` keeps the last frame.
///
/// To try again, ``retry()``: a new session, with a new process and a new view, for the same
/// items, whose view starts with the state this one's last had (the half-typed note comes
/// back). An ended session keeps its items for that for `ShareLimits.retryRetention`
/// (10 minutes), then lets them go.
public final class ShareSession: Sendable {
    /// The activity this share runs.
    public let activity: ShareActivity
    /// The items shared with it. Once the share has ended they are kept for ``retry()`` for
    /// `ShareLimits.retryRetention`, then let go (their memfds closed): empty from then on.
    public var items: [ShareItem] { retained.withLock { $0 } }
    /// The connection to the activity's process (one per share).
    public let connection: ServiceConnection
    /// The activity's view.
    public let view: RemoteView
    /// The activity's updates, in order, for one reader: each access is a stream of its own,
    /// which gets every update from the session's start (the last ``keptUpdates`` of them), then
    /// each new one, and finishes when the outcome is known. Several readers each get them all;
    /// one that falls more than ``keptUpdates`` behind loses the oldest.
    public var updates: AsyncStream<ActivityUpdate> {
        // Bounded as the history is: a reader that falls behind loses the oldest, not the host its memory.
        let (stream, continuation) = AsyncStream.makeStream(of: ActivityUpdate.self, bufferingPolicy: .bufferingNewest(Self.keptUpdates))
        let id = history.withLock { history -> UInt64? in
            // Replayed under the lock, so that no update falls between the replay and the live ones.
            for update in history.updates { continuation.yield(update) }
            return history.finished ? nil : history.readers.add(continuation)
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in self?.history.withLock { $0.readers.remove(id) } }
        return stream
    }

    /// How many updates a session keeps for readers that start late (the oldest go first).
    public static let keptUpdates = 256
    /// How long the service has to answer ``cancel(reason:)`` before it is stopped.
    public let cancelGrace: Duration

    /// The default ``cancelGrace``: 2 s.
    public static let defaultCancelGrace: Duration = .seconds(2)

    /// The updates so far, the readers of ``updates``, and waits for a state.
    private struct History {
        var updates: [ActivityUpdate] = []
        var readers = StreamReaders<ActivityUpdate>()
        var waits: [(state: ActivityState, waiter: Waiter<ActivityUpdate?>)] = []
        /// The outcome is known: no update comes any more.
        var finished = false
    }
    private let history = Mutex(History())
    private let ended = Latch<ShareOutcome>()
    /// The items, until they are let go after the share ended.
    private let retained: Mutex<[ShareItem]>
    /// What a retry launches with.
    private let launcher: Launcher
    private let retryRetention: Duration
    /// Lets the items go once ``retryRetention`` has passed after the end.
    private let release = Mutex<Task<Void, Never>?>(nil)
    private let state = Mutex<(machine: ShareSessionStateMachine<Connection>, channels: [ServiceChannel])>((ShareSessionStateMachine(), []))
    /// Run when the share completes, before its outcome is known to anyone (the sheet counts it
    /// in its ``SharePreferences``); a retry runs it too.
    private let onCompletion: (@Sendable () -> Void)?
    /// The outcome is being decided: the first ``finish(_:)`` wins.
    private let finishing = Mutex(false)

    private init(activity: ShareActivity, items: [ShareItem], launcher: Launcher, presentation: RemoteView.Presentation,
                 cancelGrace: Duration, retryRetention: Duration, restoringState: [UInt8]?, onCompletion: (@Sendable () -> Void)?) {
        self.activity = activity
        self.onCompletion = onCompletion
        retained = Mutex(items)
        self.launcher = launcher
        self.retryRetention = retryRetention
        connection = launcher.connection(to: activity.identifier)
        self.cancelGrace = cancelGrace
        view = RemoteView(connection: connection, presentation: presentation, restoringState: restoringState)
        connection.addListener(self)
        // The view and the connection are the share's: its activity runs once, for its items.
        // Once that process has gone, nothing relaunches it (which would start it without
        // them); a caller is told how the share ended.
        let activity = activity.identifier
        connection.allowOneProcess { [weak self] in
            guard let outcome = await self?.outcome else { return RemoteError(.shareEnded, "the share with \(activity) has ended") }
            return Self.ended(activity, outcome)
        }
    }

    /// The error a use of an ended share's view or connection throws: it names the share and
    /// how it ended.
    private static func ended(_ activity: String, _ outcome: ShareOutcome) -> RemoteError {
        let how = switch outcome {
        case .completed: "completed"
        case .cancelled: "cancelled"
        case .failed: "failed"
        case .interrupted: "interrupted"
        }
        return RemoteError(.shareEnded, "the share with \(activity) has ended (\(how)); its view keeps its last frame, and performing the share again runs the activity again")
    }

    deinit {
        endUpdates()
        release.withLock { $0?.cancel() }
    }

    /// A new session running `activity` with `items`, started: its connection is invalidated
    /// when it cannot start.
    static func start(activity: ShareActivity, items: [ShareItem], launcher: Launcher, presentation: RemoteView.Presentation,
                      cancelGrace: Duration, retryRetention: Duration, restoringState: [UInt8]?,
                      onCompletion: (@Sendable () -> Void)? = nil) async throws(RemoteError) -> ShareSession {
        let session = ShareSession(activity: activity, items: items, launcher: launcher, presentation: presentation,
                                   cancelGrace: cancelGrace, retryRetention: retryRetention, restoringState: restoringState,
                                   onCompletion: onCompletion)
        do { try await session.start() } catch {
            await session.connection.invalidate()
            throw error
        }
        return session
    }

    /// Runs the activity again for the same items: a new session, with a new process and a new
    /// ``view`` that starts with the restorable state this session's view last had (what the
    /// user typed before the activity crashed). A share still running is closed first (it
    /// ends *interrupted*).
    ///
    /// - Throws: `RemoteError` `shareEnded` when the items were let go (the share ended more
    ///   than `ShareLimits.retryRetention` ago), or what starting a share throws.
    public func retry() async throws(RemoteError) -> ShareSession {
        if currentOutcome == nil { await close() }
        let items = self.items
        guard !items.isEmpty else {
            let when = retryRetention > .zero ? "more than \(Self.describe(retryRetention)) ago" : "with a retry retention of 0"
            throw RemoteError(.shareEnded, "the share with \(activity.identifier) ended \(when) and its items were let go (ShareLimits.retryRetention): share them again")
        }
        return try await Self.start(activity: activity, items: items, launcher: launcher, presentation: view.presentation,
                                    cancelGrace: cancelGrace, retryRetention: retryRetention, restoringState: view.restorableState,
                                    onCompletion: onCompletion)
    }

    /// Launches the activity (if needed) and sends it the items.
    ///
    /// - Throws: `RemoteError` when the service cannot be reached, does not announce the
    ///   `share` capability, or the items cannot be sent; the outcome is then *interrupted*.
    func start() async throws(RemoteError) {
        do throws(RemoteError) {
            try await connection.withChannel { connection throws(RemoteError) in
                let peer = try await connection.peerHandshake()
                guard peer.capabilities.contains(ShareCapability.name) else {
                    throw RemoteError(.invalidArgument, "\(activity.identifier) does not announce the \"\(ShareCapability.name)\" capability in its handshake (it announced \(peer.capabilities)), so it cannot run a share")
                }
                let (wire, attachments) = try ShareItem.wire(self.items)
                // Recorded before sending: the service may answer at once.
                let channel = state.withLock { state -> ServiceChannel? in
                    guard let channel = state.channels.last(where: { $0.connection === connection }) else { return nil }
                    state.machine.requestSent(on: connection)
                    return channel
                }
                guard let channel else { throw RemoteError(.interrupted, "the connection to \(activity.identifier) closed before the share started") }
                channel.beginWork()
                try await connection.send(.request(items: wire), attachments: attachments)
            }
        } catch {
            if let outcome = state.withLock({ $0.machine.failedToStart(error) }) { finish(outcome) }
            throw error
        }
    }

    /// The last update the activity sent, if any.
    public var latestUpdate: ActivityUpdate? {
        history.withLock { $0.updates.last }
    }

    /// How the share ended, once it has (waits for it).
    public var outcome: ShareOutcome {
        get async {
            do { return try await ended.wait() } catch {
                // Only a cancelled caller gets here.
                return ended.value ?? .interrupted(RemoteError(.cancelled, "cancelled while waiting for the outcome of the share with \(activity.identifier)"))
            }
        }
    }

    /// The outcome if the share has ended; `nil` while it runs.
    public var currentOutcome: ShareOutcome? {
        ended.value
    }

    /// How the share ended, waiting for it at most `timeout`.
    ///
    /// - Throws: `RemoteError` `timeout` when the share is still running after `timeout` (it
    ///   goes on: cancel it, or wait again), `cancelled` when the waiting task is.
    public func outcome(timeout: Duration) async throws(RemoteError) -> ShareOutcome {
        do {
            return try await ended.wait(until: .now.advanced(by: timeout))
        } catch .deadlinePassed {
            throw RemoteError(.timeout, "the share with \(activity.identifier) has not ended after \(Self.describe(timeout))\(latestUpdate.map { " (its last update: \($0))" } ?? "")")
        } catch {
            throw RemoteError(.cancelled, "cancelled while waiting for the outcome of the share with \(activity.identifier)")
        }
    }

    /// The first update in `state` since the session started (at once if one came already),
    /// waiting for it at most `timeout`.
    ///
    /// - Throws: `RemoteError` `timeout` when none came within `timeout`; `shareEnded` when the
    ///   share ended without one (naming how); `cancelled` when the waiting task is.
    @discardableResult
    public func wait(for state: ActivityState, timeout: Duration) async throws(RemoteError) -> ActivityUpdate {
        let waiter = Waiter<ActivityUpdate?>()
        let found = history.withLock { history -> ActivityUpdate?? in
            if let update = history.updates.first(where: { $0.state == state }) { return .some(update) }
            if history.finished { return .some(nil) }
            history.waits.append((state, waiter))
            return nil
        }
        let result: ActivityUpdate?
        if let found {
            result = found
        } else {
            do {
                result = try await waiter.wait(until: .now.advanced(by: timeout), onAbandon: { [weak self] in
                    self?.history.withLock { $0.waits.removeAll { $0.waiter === waiter } }
                })
            } catch .deadlinePassed {
                throw RemoteError(.timeout, "no update in state \(state) from the share with \(activity.identifier) within \(Self.describe(timeout))\(latestUpdate.map { " (its last: \($0))" } ?? "")")
            } catch {
                throw RemoteError(.cancelled, "cancelled while waiting for the share with \(activity.identifier) to be \(state)")
            }
        }
        guard let result else {
            let how = currentOutcome.map { "\($0)" } ?? "ended"
            throw RemoteError(.shareEnded, "the share with \(activity.identifier) ended (\(how)) without an update in state \(state)")
        }
        return result
    }

    /// The user dismissed the share: `share_cancel` goes to the activity, which has
    /// ``cancelGrace`` to answer; one that does not is stopped, with that as the reason.
    /// Returns the outcome (what the activity answered, or *interrupted*).
    @discardableResult
    public func cancel(reason: String = "dismissed") async -> ShareOutcome {
        switch state.withLock({ $0.machine.cancelRequested() }) {
        case .finished(let outcome):
            finish(outcome)
            return outcome
        case .wait:
            return await outcome
        case .send(let connection):
            try? await connection.send(.cancel(reason: reason))
            let deadline = ContinuousClock.now.advanced(by: cancelGrace)
            if let outcome = await ended.waitUncancellably(until: deadline) { return outcome }
            if let channel = channel(of: connection) {
                channel.endService(violating: "did not answer share_cancel within \(Self.describe(cancelGrace))")
            }
            return await ended.waitUncancellably() ?? .interrupted(RemoteError(.interrupted, "the share was cancelled"))
        }
    }

    /// Ends the session: the connection is invalidated (the process stopped). A share still
    /// running ends *interrupted*, without the activity being asked: call ``cancel(reason:)``
    /// first to let it answer. One that has completed and is being counted in the sheet's
    /// ``SharePreferences`` ends *completed* once the count is written (at most
    /// `SharePreferences.lockPatience`, 1 s, later). The view keeps its last frame.
    public func close() async {
        if case .finished(let outcome) = state.withLock({ $0.machine.cancelRequested() }) { finish(outcome) }
        await connection.invalidate()
        // A share the process was still running ended with its connection.
        if ended.value == nil { finish(.interrupted(RemoteError(.invalidated, "the share with \(activity.identifier) was closed by the host before it finished"))) }
    }

    private func finish(_ outcome: ShareOutcome) {
        let first = finishing.withLock { finishing in
            defer { finishing = true }
            return !finishing
        }
        guard first else { return }
        guard case .completed = outcome, let onCompletion else { return conclude(outcome) }
        // Off the caller's thread (it may be the connection's loop) and off the cooperative
        // pool: it writes a file, waiting at most SharePreferences.lockPatience for its lock.
        Self.completions.async {
            onCompletion()
            self.conclude(outcome)
        }
    }

    /// Where completions are counted (``onCompletion``): blocking file work, one at a time.
    private static let completions = DispatchQueue(label: "remoteview.share-completions", qos: .utility)

    private func conclude(_ outcome: ShareOutcome) {
        guard ended.open(outcome) else { return }
        endUpdates()
        // The items stay for a retry, for a while.
        guard retryRetention > .zero else { return retained.withLock { $0 = [] } }
        let retention = retryRetention
        release.withLock { release in
            release = Task { [weak self] in
                guard (try? await Task.sleep(for: retention)) != nil else { return }
                self?.retained.withLock { $0 = [] }
            }
        }
    }

    /// No update comes any more: every reader's stream ends, and every wait for a state ends
    /// without one.
    private func endUpdates() {
        let (readers, waits) = history.withLock { history in
            history.finished = true
            defer { history.waits = [] }
            return (history.readers.all, history.waits)
        }
        readers.forEach { $0.finish() }
        waits.forEach { $0.waiter.resume(returning: nil) }
    }

    /// Keeps `update` for late readers, and gives it to every reader and to the waits it ends.
    private func publish(_ update: ActivityUpdate) {
        let waits = history.withLock { history -> [Waiter<ActivityUpdate?>] in
            history.updates.append(update)
            if history.updates.count > Self.keptUpdates { history.updates.removeFirst(history.updates.count - Self.keptUpdates) }
            // Under the lock: every reader gets the updates in order, none between its replay and these.
            history.readers.yield(update)
            var ended: [Waiter<ActivityUpdate?>] = []
            history.waits.removeAll { wait in
                guard wait.state == update.state else { return false }
                ended.append(wait.waiter)
                return true
            }
            return ended
        }
        for waiter in waits { waiter.resume(returning: update) }
    }

    private static func describe(_ duration: Duration) -> String {
        let seconds = duration.inSeconds
        if seconds >= 60, seconds.truncatingRemainder(dividingBy: 60) == 0 { return "\(Int(seconds / 60)) min" }
        return seconds == seconds.rounded() ? "\(Int(seconds)) s" : "\(seconds) s"
    }

    /// The open channel whose connection is `connection`, if it has not closed.
    private func channel(of connection: Connection) -> ServiceChannel? {
        state.withLock { $0.channels.last(where: { $0.connection === connection }) }
    }

    /// A share message from the service on `channel`; throws a broken rule as a violation,
    /// which ends the connection and the service.
    private func receive(_ message: ShareMessage, attachments: [Attachment], on channel: ServiceChannel) throws(RemoteError) {
        var items: [ShareItem] = []
        if case .complete(.completed, let wire, _) = message {
            do { items = try ShareItem.received(wire, attachments: attachments) } catch {
                throw RemoteError(.protocolViolation, error.reason)
            }
        }
        switch state.withLock({ $0.machine.received(message, items: items, on: channel.connection) }) {
        case .update(let update):
            publish(update)
        case .finish(let outcome):
            channel.endWork()
            finish(outcome)
        case .violation(let reason):
            throw RemoteError(.protocolViolation, reason)
        }
    }

}

extension ShareSession: ServiceChannelListener {
    package func channelWillRun(_ channel: ServiceChannel) {
        state.withLock { $0.channels.append(channel) }
        channel.route(share: { [weak self] message, attachments, _ throws(RemoteError) in
            guard let self else { throw RemoteError(.protocolViolation, "\(message.name) but no share session is open") }
            try self.receive(message, attachments: attachments, on: channel)
        })
    }

    package func channelDidOpen(_ channel: ServiceChannel) async throws(RemoteError) {}

    package func channelDidClose(_ channel: ServiceChannel, error: RemoteError?) {
        let outcome = state.withLock { state -> ShareOutcome? in
            state.channels.removeAll { $0.isSame(as: channel) }
            return state.machine.channelClosed(channel.connection, error: error)
        }
        if let outcome {
            channel.endWork()
            finish(outcome)
        }
    }
}
