import Logging
import RemoteCore
import RemoteHost

/// Runs a service through the protocol, as a launcher would start it, and records in `report`
/// which rules it keeps: `docs/Protocol.md`, rule by rule.
struct Checker: Sendable {
    let manifest: ServiceManifest
    let sandbox: SandboxPolicy
    let dataRoot: String
    let logger: Logger
    /// The highest protocol version the checker's host offers (`max_protocol_version`).
    var offeredVersion: UInt32 = remoteViewLatestProtocolVersion
    let report = Report()

    /// The version in force with the service, once its handshake was read (else the offered one).
    var version: UInt32 { report.protocolVersions?.inForce ?? offeredVersion }

    static let hostIdentifier = "com.example.remoteview-check"
    static let wait = Duration.seconds(5)

    func run() async -> Report {
        await checkConversation()
        await checkIdleExit()
        // Every packet received went through the transport's id check (failures are recorded
        // by each peer's reader); with no packet, there was nothing to check.
        if report.anyReceived { report.passUnlessRecorded("ids.increase") } else { report.skip("ids.increase", "not reached: no packet came from the service") }
        return report
    }

    // MARK: fd 3, clients, hostile packets, the view, the share, the exit

    private func checkConversation() async {
        let service: RawServiceProcess
        do {
            service = try await RawServiceProcess.start(manifest, sandbox: sandbox, dataRoot: dataRoot, logger: logger)
        } catch {
            report.fail("handshake.first", "the service could not be started: \(error.reason)")
            return
        }
        let control = Peer(service.socket, name: "fd 3", report: report)
        defer { control.close() }
        guard await handshake(on: control) != nil else {
            let ending = await service.ending(before: .now.advanced(by: Self.wait))
            if let ending { report.processDied(ending) }
            report.ended("conversation", ending)
            await service.stop()
            return
        }
        report.record("ping", await control.ping()?.reason)

        // A client: requests, messages, cancels.
        if let (client, peer) = await connect(control, name: "client 1") {
            report.record("ping", await client.ping()?.reason)
            await checkUnknownRequest(on: client)
            do {
                try await client.send(.message(type: "remoteview-check.unknown", payload: []))
                report.record("message.unknown", await client.ping()?.reason)
                try await client.send(.cancel(requestID: 999_999))
                report.record("cancel.unknown", await client.ping()?.reason)
            } catch {
                report.fail("message.unknown", "cannot send: \(error.reason)")
            }
            // Several at once, then a goodbye ends only its own.
            if let (second, _) = await connect(control, name: "client 2") {
                let both = [await client.ping(), await second.ping()].compactMap { $0?.reason }
                report.record("clients.several", both.first)
                do {
                    try await second.send(.goodbye(reason: "remoteview-check is done with this client"))
                    if let open = await second.expectClose() { report.fail("goodbye", open) }
                    let clientFailure = await client.ping(), controlFailure = await control.ping()
                    report.record("goodbye", (clientFailure ?? controlFailure)?.reason)
                } catch {
                    report.fail("goodbye", "cannot send a goodbye: \(error.reason)")
                }
                second.close()
            }
            await checkHostile(control, survivor: client)
            if peer.capabilities.contains("surfaces") {
                report.pass("view.announced")
                await checkView(control, share: peer.capabilities.contains("share"))
            } else if version < 2 {
                // Version 1 needed no announcing: a host presented any service. The view is
                // tried; one that answers is served, with a warning for version 2.
                await checkView(control, share: peer.capabilities.contains("share"), announced: false)
            } else {
                for rule in Rule.all where rule.id.hasPrefix("view.") || ["input.before-size", "state.only-if-announced", "focus.only-if-announced", "tree.only-if-announced"].contains(rule.id) {
                    report.skip(rule.id, "the service does not announce \"surfaces\"")
                }
            }
            if peer.capabilities.contains("surfaces"), peer.capabilities.contains("restorable-state") {
                await checkState(control, share: peer.capabilities.contains("share"))
            } else {
                let why = peer.capabilities.contains("restorable-state") ? "the service does not announce \"surfaces\"" : "the service does not announce \"restorable-state\""
                for rule in ["state.restore", "state.bounds"] { report.skip(rule, why) }
            }
            if peer.capabilities.contains("surfaces"), peer.capabilities.contains(AccessibilityCapability.name) {
                await checkAccessibility(control, share: peer.capabilities.contains("share"))
            } else {
                let why = peer.capabilities.contains("surfaces") ? "the service does not announce \"accessibility\" (its view has no semantic tree: a screen reader sees nothing of it)"
                    : "the service does not announce \"surfaces\""
                for rule in Rule.all where rule.id.hasPrefix("tree.") && rule.id != "tree.only-if-announced" { report.skip(rule.id, why) }
            }
            if peer.capabilities.contains("share") {
                await checkShare(control, view: peer.capabilities.contains("surfaces"))
            } else {
                for rule in Rule.all where rule.id.hasPrefix("share.") { report.skip(rule.id, "the service does not announce \"share\"") }
            }
            client.close()
        }

        // fd 3 closes without a goodbye, as when the host crashes (the harder case: a goodbye
        // says it in words), and the process must go. One that went before has nothing to show.
        // Ended before fd 3 closes when fd 3 is dead already (a ping cannot be sent, or fd 3
        // closed under it; a ping merely unanswered is a slow service) and the process is gone.
        let dead = await control.ping(within: .seconds(1)).map { !$0.reason.hasPrefix("no ") } ?? false
        let endedBefore = dead ? await service.exit(before: .now.advanced(by: .seconds(1))) != nil : false
        control.close()
        let ending = await service.ending(before: .now.advanced(by: Self.wait))
        if let ending, endedBefore {
            report.skip("exit.fd3", "not reached: the process had ended before fd 3 closed")
            report.processDied(ending)
        } else if let ending {
            report.pass("exit.fd3", "\(ending)")
        } else {
            report.fail("exit.fd3", "still running \(Self.wait) after fd 3 closed")
        }
        report.ended("conversation", ending)
        await service.stop()
    }

    /// Reads the service's handshake on `peer` and sends ours; returns the service's.
    private func handshake(on peer: Peer, version: UInt32 = remoteViewProtocolVersion, capabilities: [String] = []) async -> Handshake? {
        let first = await peer.receive(within: Self.wait)
        guard case .envelope(let envelope) = first, case .handshake(let theirs) = envelope.body else {
            report.fail(peer.name == "fd 3" ? "handshake.first" : "connect", "first on \(peer.name): \(first.summary)")
            return nil
        }
        if peer.name == "fd 3" {
            let versions = Report.Versions(service: theirs.highestVersion, offered: offeredVersion)
            report.protocolVersions = versions
            let said = "protocol \(theirs.protocolVersion), speaks up to \(theirs.highestVersion)\(theirs.maxProtocolVersion == nil ? " (no max_protocol_version)" : ""); checked under protocol \(versions.inForce)"
            if theirs.protocolVersion != remoteViewProtocolVersion || theirs.role != .service {
                report.fail("handshake.first", "\(said), role \(theirs.role)")
            } else {
                report.pass("handshake.first", said)
            }
        }
        if theirs.identifier != manifest.identifier {
            report.fail("handshake.identifier", "\"\(theirs.identifier)\" on \(peer.name), the manifest says \"\(manifest.identifier)\"")
        } else {
            report.pass("handshake.identifier")
        }
        do {
            try await peer.send(.handshake(Handshake(protocolVersion: version, role: .host, identifier: Self.hostIdentifier,
                                                     capabilities: capabilities, maxProtocolVersion: offeredVersion)))
        } catch {
            report.fail("connect", "cannot send the handshake on \(peer.name): \(error.reason)")
            return nil
        }
        return theirs
    }

    /// A new client: a socket sent in remoteview.connect on `control`; both handshakes done
    /// (ours with `version`, announcing `capabilities`).
    func connect(_ control: Peer, name: String, version: UInt32 = remoteViewProtocolVersion, capabilities: [String] = []) async -> (Peer, Handshake)? {
        let peer: Peer
        do throws(SystemCallError) {
            let pair = try SeqpacketSocket.pair()
            let ours = pair.first
            let theirs = Attachment(pair.second)
            peer = Peer(try SeqpacketSocket(ours), name: name, report: report)
            do {
                try await control.send(.message(type: "remoteview.connect", payload: []), attachments: [theirs])
            } catch {
                report.fail("connect", "cannot send remoteview.connect: \(error.reason)")
                return nil
            }
        } catch {
            report.fail("connect", "cannot make a socket pair: \(error)")
            return nil
        }
        guard let theirs = await handshake(on: peer, version: version, capabilities: capabilities) else {
            peer.close()
            return nil
        }
        report.pass("connect")
        return (peer, theirs)
    }

    private func checkUnknownRequest(on client: Peer) async {
        let id: UInt64
        do { id = try await client.send(.request(type: "remoteview-check.no-such-request", payload: [])) } catch {
            return report.fail("request.unknown", "cannot send: \(error.reason)")
        }
        switch await client.await(within: Self.wait, "answer to request \(id)", { envelope -> Envelope? in
            envelope.replyTo == id ? envelope : nil
        }) {
        case .success(let answer):
            if case .failure(let failure) = answer.body, failure.isUnknownRequest {
                report.pass("request.unknown", failure.message)
            } else if case .failure(let failure) = answer.body {
                // Version 2's rule; version 1 set no domain.
                let seen = "failure \(failure.domain) \(failure.code): \(failure.message)"
                if version < 2 { report.warn("request.unknown", wouldFailUnder: 2, seen + " (version 2 wants domain RemoteView, code 1)") } else { report.fail("request.unknown", seen) }
            } else {
                report.fail("request.unknown", "\(answer.body.name) instead of a failure")
            }
        case .failure(let failure):
            report.fail("request.unknown", failure.reason)
        }
    }

    /// Packets no host should send, each on a client of its own; `survivor` and fd 3 must still
    /// answer after each.
    private func checkHostile(_ control: Peer, survivor: Peer) async {
        // Another protocol version.
        let pair: SocketPair
        do { pair = try SeqpacketSocket.pair() } catch { return report.fail("hostile.version", "cannot make a socket pair: \(error)") }
        let ours = pair.first
        let socket: SeqpacketSocket
        do { socket = try SeqpacketSocket(ours) } catch { return report.fail("hostile.version", "cannot make a socket: \(error)") }
        do throws(RemoteError) {
            let peer = Peer(socket, name: "client 3", report: report)
            try await control.send(.message(type: "remoteview.connect", payload: []), attachments: [Attachment(pair.second)])
            _ = await peer.receive(within: Self.wait)  // its handshake
            try await peer.send(.handshake(Handshake(protocolVersion: 99, role: .host, identifier: Self.hostIdentifier)))
            report.record("hostile.version", await peer.expectRefusal(.versionMismatch))
            peer.close()
        } catch {
            report.fail("hostile.version", error.reason)
        }
        await checkSurvived(control, survivor, after: "version 99")

        // The same id twice (ours were 1 and 2: the handshake and a ping).
        await checkRefusesMalformed("hostile.id-order", client: "client 4", control, survivor, after: "an id out of order", pingFirst: true) { peer throws(RemoteError) in
            try EnvelopeCodec.encode(Envelope(id: peer.socket.lastSentID, body: .ping(nonce: 1)))
        }
        // No known body: the id, then only field 999 (a varint).
        await checkRefusesMalformed("hostile.unknown-body", client: "client 5", control, survivor, after: "an unknown body") { peer in
            EnvelopeCodec.UnnumberedPacket.withIDField(peer.socket.lastSentID + 1) { Array($0) } + [0xB8, 0x3E, 0x01]
        }
        // Garbage.
        await checkRefusesMalformed("hostile.garbage", client: "client 6", control, survivor, after: "garbage") { _ in
            [0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x08]
        }
    }

    /// Sends `packet` (made for the new client, after a ping when `pingFirst`) as it is, outside
    /// the numbering; the service must refuse it as `MALFORMED` under `rule`, and fd 3 and
    /// `survivor` must still answer.
    private func checkRefusesMalformed(_ rule: String, client name: String, _ control: Peer, _ survivor: Peer, after what: String,
                                       pingFirst: Bool = false, packet: (Peer) throws(RemoteError) -> [UInt8]) async {
        guard let (peer, _) = await connect(control, name: name) else { return }
        if pingFirst, let failure = await peer.ping() {
            report.fail("ping", failure.reason)
        } else {
            do throws(RemoteError) {
                try peer.sendUnnumbered(try packet(peer))
                report.record(rule, await peer.expectRefusal(.malformed))
            } catch {
                report.fail(rule, error.reason)
            }
        }
        peer.close()
        await checkSurvived(control, survivor, after: what)
    }

    private func checkSurvived(_ control: Peer, _ survivor: Peer, after what: String) async {
        let controlFailure = await control.ping(), survivorFailure = await survivor.ping()
        if let failure = controlFailure ?? survivorFailure {
            report.fail("hostile.survived", "after \(what): \(failure.reason)")
        } else {
            report.pass("hostile.survived")
        }
    }

    // MARK: idle exit

    private func checkIdleExit() async {
        var quick = manifest
        quick.idleTimeout = .seconds(1)
        let service: RawServiceProcess
        do {
            service = try await RawServiceProcess.start(quick, sandbox: sandbox, dataRoot: dataRoot, logger: logger)
        } catch {
            return report.fail("idle.exit", "the service could not be started: \(error.reason)")
        }
        let control = Peer(service.socket, name: "fd 3", report: report)
        defer { control.close() }
        guard await handshake(on: control) != nil else {
            report.ended("idle exit", await service.ending(before: .now.advanced(by: Self.wait)))
            await service.stop()
            return
        }
        if let (client, _) = await connect(control, name: "client 1") {
            _ = await client.ping()
            _ = try? await client.send(.goodbye(reason: "remoteview-check is done with this client"))
            client.close()
        }
        // REMOTEVIEW_IDLE_TIMEOUT is 1 s now: the goodbye comes after that, then the end.
        switch await control.await(within: .seconds(1) + Self.wait, "goodbye", { envelope -> String? in
            if case .goodbye(let reason) = envelope.body { reason } else { nil }
        }) {
        case .success(let reason):
            report.record("idle.goodbye", reason == "idle exit" ? nil : "goodbye \"\(reason)\", where the rule says \"idle exit\"")
        case .failure(let failure):
            report.fail("idle.goodbye", failure.reason)
        }
        let ending = await service.ending(before: .now.advanced(by: Self.wait))
        if let ending {
            report.record("idle.exit", ending.kind == .exited && ending.exitCode == 0 ? nil : "it \(ending.detail)")
        } else {
            report.fail("idle.exit", "still running \(Self.wait) after the idle timeout")
        }
        report.ended("idle exit", ending)
        await service.stop()
    }
}
