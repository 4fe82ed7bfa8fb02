import CProto

/// The share family (fields 300–303): `share_request` and `share_cancel` from the host,
/// `activity_update` and `share_complete` from the service. See `docs/Protocol.md`, "Share".
extension EnvelopeCodec {
    /// The share body of `e`, validated; `nil` when `e` carries another family.
    static func decodeShare(_ e: Remoteview__Envelope) throws(RemoteError) -> Envelope.Body? {
        let message: ShareMessage
        switch e.body_case {
        case REMOTEVIEW__ENVELOPE__BODY_SHARE_REQUEST:
            let r = e.share_request.pointee
            message = .request(items: try items(r.items, r.n_items, "share_request"))
        case REMOTEVIEW__ENVELOPE__BODY_SHARE_CANCEL:
            message = .cancel(reason: try string(e.share_cancel.pointee.reason, "share_cancel reason", max: WireLimits.maxReasonLength))
        case REMOTEVIEW__ENVELOPE__BODY_ACTIVITY_UPDATE:
            let u = e.activity_update.pointee
            let state: ActivityState
            switch u.state {
            case REMOTEVIEW__ACTIVITY_STATE__ACTIVITY_STATE_PREPARING: state = .preparing
            case REMOTEVIEW__ACTIVITY_STATE__ACTIVITY_STATE_READY: state = .ready
            case REMOTEVIEW__ACTIVITY_STATE__ACTIVITY_STATE_WORKING: state = .working
            case REMOTEVIEW__ACTIVITY_STATE__ACTIVITY_STATE_DONE: state = .done
            default: throw violation("activity_update state \(u.state.rawValue) is not preparing (1), ready (2), working (3) or done (4)")
            }
            if u.indeterminate != 0, u.progress != 0 {
                throw violation("activity_update is indeterminate but has progress \(u.progress)")
            }
            let subtitle = try string(u.subtitle, "activity_update subtitle", max: ShareLimits.maxSubtitleBytes)
            message = .update(ActivityUpdate(
                title: try string(u.title, "activity_update title", max: ShareLimits.maxTitleBytes),
                subtitle: subtitle.isEmpty ? nil : subtitle,
                progress: u.indeterminate != 0 ? nil : Double(u.progress), state: state))
        case REMOTEVIEW__ENVELOPE__BODY_SHARE_COMPLETE:
            let c = e.share_complete.pointee
            let result: WireShareResult
            switch c.result {
            case REMOTEVIEW__SHARE_RESULT__SHARE_RESULT_COMPLETED: result = .completed
            case REMOTEVIEW__SHARE_RESULT__SHARE_RESULT_CANCELLED: result = .cancelled
            case REMOTEVIEW__SHARE_RESULT__SHARE_RESULT_FAILED: result = .failed
            default: throw violation("share_complete result \(c.result.rawValue) is not completed (1), cancelled (2) or failed (3)")
            }
            message = .complete(result, items: try items(c.items, c.n_items, "share_complete"),
                                message: try string(c.message, "share_complete message", max: ShareLimits.maxMessageBytes))
        default:
            return nil
        }
        if let problem = message.problem { throw violation(problem) }
        return .share(message)
    }

    private static func items(_ items: UnsafeMutablePointer<UnsafeMutablePointer<Remoteview__ShareItem>?>?, _ count: Int,
                              _ what: String) throws(RemoteError) -> [WireShareItem] {
        guard count <= ShareLimits.maxItems else { throw violation("\(what) carries \(count) items, more than \(ShareLimits.maxItems)") }
        var result: [WireShareItem] = []
        for index in 0..<count {
            guard let pointer = items?[index] else { throw violation("\(what) item \(index) is missing") }
            let i = pointer.pointee
            let kind: WireItemKind
            switch i.kind {
            case REMOTEVIEW__ITEM_KIND__ITEM_KIND_TEXT: kind = .text
            case REMOTEVIEW__ITEM_KIND__ITEM_KIND_URL: kind = .url
            case REMOTEVIEW__ITEM_KIND__ITEM_KIND_FILE: kind = .file
            default: throw violation("\(what) item \(index) kind \(i.kind.rawValue) is not text (1), url (2) or file (3)")
            }
            let field = "\(what) item \(index)"
            guard i.size <= UInt64(ShareLimits.maxFileBytes) else {
                throw violation("\(field) size \(i.size) is over \(ShareLimits.maxFileBytes) bytes")
            }
            let contentType = try string(i.content_type, "\(field) content_type", max: ShareLimits.maxContentTypeLength)
            guard MIMEType.normalized(contentType) == contentType else {
                throw violation("\(field) content_type \"\(contentType.escapedForTerminal())\" is not in lower case")
            }
            result.append(WireShareItem(
                kind: kind, contentType: contentType,
                text: try string(i.text, "\(field) text", max: max(ShareLimits.maxTextBytes, ShareLimits.maxURLBytes)),
                name: try string(i.name, "\(field) name", max: ShareLimits.maxFileNameBytes),
                size: Int(i.size)))
        }
        return result
    }
}

extension CArena {
    /// Fills `e`'s body with a share message (already validated).
    func encode(_ message: ShareMessage, into e: inout Remoteview__Envelope) {
        switch message {
        case .request(let items):
            let r = self.message(Remoteview__ShareRequest.self, remoteview__share_request__init)
            (r.pointee.n_items, r.pointee.items) = (items.count, encode(items))
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_SHARE_REQUEST
            e.share_request = r
        case .cancel(let reason):
            let c = self.message(Remoteview__ShareCancel.self, remoteview__share_cancel__init)
            c.pointee.reason = string(reason)
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_SHARE_CANCEL
            e.share_cancel = c
        case .update(let update):
            let u = self.message(Remoteview__ActivityUpdate.self, remoteview__activity_update__init)
            u.pointee.title = string(update.title)
            u.pointee.subtitle = string(update.subtitle ?? "")
            u.pointee.indeterminate = update.progress == nil ? 1 : 0
            u.pointee.progress = Float(update.progress ?? 0)
            u.pointee.state = switch update.state {
            case .preparing: REMOTEVIEW__ACTIVITY_STATE__ACTIVITY_STATE_PREPARING
            case .ready: REMOTEVIEW__ACTIVITY_STATE__ACTIVITY_STATE_READY
            case .working: REMOTEVIEW__ACTIVITY_STATE__ACTIVITY_STATE_WORKING
            case .done: REMOTEVIEW__ACTIVITY_STATE__ACTIVITY_STATE_DONE
            }
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_ACTIVITY_UPDATE
            e.activity_update = u
        case .complete(let result, let items, let text):
            let c = self.message(Remoteview__ShareComplete.self, remoteview__share_complete__init)
            c.pointee.result = switch result {
            case .completed: REMOTEVIEW__SHARE_RESULT__SHARE_RESULT_COMPLETED
            case .cancelled: REMOTEVIEW__SHARE_RESULT__SHARE_RESULT_CANCELLED
            case .failed: REMOTEVIEW__SHARE_RESULT__SHARE_RESULT_FAILED
            }
            (c.pointee.n_items, c.pointee.items) = (items.count, encode(items))
            c.pointee.message = string(text)
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_SHARE_COMPLETE
            e.share_complete = c
        }
    }

    private func encode(_ items: [WireShareItem]) -> UnsafeMutablePointer<UnsafeMutablePointer<Remoteview__ShareItem>?>? {
        guard !items.isEmpty else { return nil }
        let array = allocate(MemoryLayout<UnsafeMutablePointer<Remoteview__ShareItem>?>.stride * items.count)
            .bindMemory(to: UnsafeMutablePointer<Remoteview__ShareItem>?.self, capacity: items.count)
        for (index, item) in items.enumerated() {
            let i = message(Remoteview__ShareItem.self, remoteview__share_item__init)
            i.pointee.kind = switch item.kind {
            case .text: REMOTEVIEW__ITEM_KIND__ITEM_KIND_TEXT
            case .url: REMOTEVIEW__ITEM_KIND__ITEM_KIND_URL
            case .file: REMOTEVIEW__ITEM_KIND__ITEM_KIND_FILE
            }
            i.pointee.content_type = string(item.contentType)
            i.pointee.text = string(item.text)
            i.pointee.name = string(item.name)
            i.pointee.size = UInt64(item.size)
            array[index] = i
        }
        return array
    }
}
