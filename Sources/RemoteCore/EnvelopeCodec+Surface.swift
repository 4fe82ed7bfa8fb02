import CProto

/// The surface family (fields 100–109): a service's buffers and frames, the host's size and
/// pacing. See `docs/Protocol.md`, "Surfaces".
extension EnvelopeCodec {
    /// The surface body of `e`, validated; `nil` when `e` carries another family.
    static func decodeSurface(_ e: Remoteview__Envelope) throws(RemoteError) -> Envelope.Body? {
        switch e.body_case {
        case REMOTEVIEW__ENVELOPE__BODY_ATTACH_BUFFER:
            let a = e.attach_buffer.pointee
            guard a.format == REMOTEVIEW__PIXEL_FORMAT__PIXEL_FORMAT_ARGB8888_PREMULTIPLIED else {
                throw violation("attach_buffer of buffer \(a.buffer_id) has pixel format \(a.format.rawValue), not ARGB8888_PREMULTIPLIED (1)")
            }
            return try surface(.attachBuffer(BufferDescription(id: a.buffer_id, width: Int(a.width), height: Int(a.height),
                                                                stride: Int(a.stride))))
        case REMOTEVIEW__ENVELOPE__BODY_COMMIT:
            let c = e.commit.pointee
            // The count is checked before the rects are read (protobuf-c already bounded them by the packet).
            guard c.n_damage <= SurfaceLimits.maxDamageRects else {
                throw violation("commit of buffer \(c.buffer_id) has \(c.n_damage) damage rects; at most \(SurfaceLimits.maxDamageRects)")
            }
            let damage = (0..<c.n_damage).map { index in
                let r = c.damage[index]!.pointee
                return PixelRect(x: Int(r.x), y: Int(r.y), width: Int(r.width), height: Int(r.height))
            }
            return try surface(.commit(bufferID: c.buffer_id, damage: damage, frame: c.frame))
        case REMOTEVIEW__ENVELOPE__BODY_RELEASE_BUFFER:
            return try surface(.releaseBuffer(e.release_buffer.pointee.buffer_id))
        case REMOTEVIEW__ENVELOPE__BODY_FRAME_DONE:
            return try surface(.frameDone(frame: e.frame_done.pointee.frame))
        case REMOTEVIEW__ENVELOPE__BODY_DESTROY_BUFFER:
            return try surface(.destroyBuffer(e.destroy_buffer.pointee.buffer_id))
        case REMOTEVIEW__ENVELOPE__BODY_RESIZE:
            let r = e.resize.pointee
            return try surface(.resize(SurfaceSize(width: Int(r.width), height: Int(r.height), scalePermille: Int(r.scale_permille))))
        case REMOTEVIEW__ENVELOPE__BODY_PREFERRED_SIZE:
            let p = e.preferred_size.pointee
            return try surface(.preferredSize(width: Int(p.width), height: Int(p.height)))
        case REMOTEVIEW__ENVELOPE__BODY_RESTORABLE_STATE:
            return try surface(.restorableState(try state(e.restorable_state.pointee, fds: e.fd_count, in: "restorable_state")))
        case REMOTEVIEW__ENVELOPE__BODY_RESTORE_STATE:
            return try surface(.restoreState(try state(e.restore_state.pointee, fds: e.fd_count, in: "restore_state")))
        case REMOTEVIEW__ENVELOPE__BODY_FOCUS_LEAVE:
            switch e.focus_leave.pointee.direction {
            case REMOTEVIEW__FOCUS_DIRECTION__FOCUS_DIRECTION_FORWARD: return try surface(.focusLeave(.forward))
            case REMOTEVIEW__FOCUS_DIRECTION__FOCUS_DIRECTION_BACKWARD: return try surface(.focusLeave(.backward))
            default: throw violation("focus_leave direction \(e.focus_leave.pointee.direction.rawValue) is not forward (1) or backward (2)")
            }
        case REMOTEVIEW__ENVELOPE__BODY_ACCESSIBILITY_UPDATE:
            return try surface(.accessibilityUpdate(try accessibilityUpdate(e.accessibility_update.pointee)))
        case REMOTEVIEW__ENVELOPE__BODY_ACCESSIBILITY_ACTION:
            return try surface(.accessibilityAction(try accessibilityAction(e.accessibility_action.pointee)))
        default:
            return nil
        }
    }

    /// A state's two forms: inline without an fd, or a memfd's size with one.
    private static func state(_ s: Remoteview__RestorableState, fds: UInt32, in message: String) throws(RemoteError) -> RestorableStateWire {
        let inline = s.data.len == 0 ? [] : Array(UnsafeBufferPointer(start: s.data.data, count: s.data.len))
        switch fds {
        case 0:
            guard s.size == 0 else { throw violation("\(message) declares a memfd of \(s.size) bytes but carries no fd") }
            return .inline(inline)
        default:
            guard inline.isEmpty else { throw violation("\(message) carries both inline bytes (\(inline.count)) and a memfd") }
            guard s.size <= UInt64(RestorableStateLimits.maxBytes) else {
                throw violation("\(message) declares a memfd of \(s.size) bytes; 1…\(RestorableStateLimits.maxBytes)")
            }
            return .memfd(size: Int(s.size))
        }
    }

    /// An update's nodes, read within the tree's bounds: the count before any node is read, each
    /// text's length before it is copied. Unknown roles read as unknown, unknown bits are dropped.
    private static func accessibilityUpdate(_ u: Remoteview__AccessibilityUpdate) throws(RemoteError) -> AccessibilityUpdateWire {
        guard u.n_nodes <= AccessibilityLimits.maxNodes else {
            throw AccessibilityRule.nodeCount.violation("an update of \(u.n_nodes) nodes; a tree has at most \(AccessibilityLimits.maxNodes)")
        }
        var nodes: [AccessibilityNodeDescription] = []
        nodes.reserveCapacity(u.n_nodes)
        var children = 0
        for index in 0..<u.n_nodes {
            let n = u.nodes[index]!.pointee
            let limit = AccessibilityLimits.maxTextBytes
            let label: String, value: String
            do throws(RemoteError) {
                label = try string(n.label, "node \(n.id)'s label", max: limit)
                value = try string(n.value, "node \(n.id)'s value", max: limit)
            } catch {
                throw AccessibilityRule.textLength.violation(error.reason)
            }
            children += n.n_children
            guard children <= AccessibilityLimits.maxNodes else {
                throw AccessibilityRule.nodeCount.violation("an update lists \(children) children or more; a tree has at most \(AccessibilityLimits.maxNodes) nodes, each the child of one")
            }
            let children = n.n_children == 0 ? [] : Array(UnsafeBufferPointer(start: n.children, count: n.n_children))
            let role = AccessibilityRole(rawValue: n.role.rawValue)
            nodes.append(AccessibilityNodeDescription(
                id: n.id,
                role: AccessibilityRole.known.contains(role) ? role : .unknown,
                label: label, value: value,
                states: AccessibilityStates(rawValue: n.states).intersection(.wire),
                actions: AccessibilityActions(rawValue: n.actions).intersection(.wire),
                frame: AccessibilityFrame(x: Double(n.x), y: Double(n.y), width: Double(n.width), height: Double(n.height)),
                children: children,
                range: n.has_range != 0 ? AccessibilityRange(minimum: n.range_min, maximum: n.range_max, value: n.range_value) : nil))
        }
        return AccessibilityUpdateWire(nodes: nodes, root: u.root, focus: u.focus, whole: u.whole != 0, more: u.more != 0)
    }

    private static func accessibilityAction(_ a: Remoteview__AccessibilityAction) throws(RemoteError) -> AccessibilityActionWire {
        let action: AccessibilityAction
        switch a.action {
        case REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_PRESS: action = .press
        case REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_FOCUS: action = .focus
        case REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_SET_VALUE:
            let text: String
            do throws(RemoteError) {
                text = try string(a.text, "accessibility_action's text", max: AccessibilityLimits.maxTextBytes)
            } catch {
                throw AccessibilityRule.textLength.violation(error.reason)
            }
            // A number (has_number), or else a text: an action sets one of them.
            guard a.has_number == 0 || text.isEmpty else { throw violation("accessibility_action sets both a text and a number") }
            action = a.has_number != 0 ? .setNumber(a.number) : .setText(text)
        case REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_INCREMENT: action = .increment
        case REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_DECREMENT: action = .decrement
        case REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_SCROLL_INTO_VIEW: action = .scrollIntoView
        default: throw violation("accessibility_action \(a.action.rawValue) is not an action (1…6)")
        }
        guard a.has_number != 0 || a.number == 0 else { throw violation("accessibility_action carries a number without has_number") }
        return AccessibilityActionWire(node: a.node, action: action)
    }

    /// A surface body, once its values are known to be possible.
    private static func surface(_ message: SurfaceMessage) throws(RemoteError) -> Envelope.Body {
        if let problem = message.problem { throw violation(problem) }
        return .surface(message)
    }
}

extension CArena {
    /// Fills `e`'s body with a surface message (already validated, so every value fits its field).
    func encode(_ surface: SurfaceMessage, into e: inout Remoteview__Envelope) {
        switch surface {
        case .attachBuffer(let buffer):
            let a = message(Remoteview__AttachBuffer.self, remoteview__attach_buffer__init)
            a.pointee.buffer_id = buffer.id
            a.pointee.width = UInt32(buffer.width)
            a.pointee.height = UInt32(buffer.height)
            a.pointee.stride = UInt32(buffer.stride)
            a.pointee.format = REMOTEVIEW__PIXEL_FORMAT__PIXEL_FORMAT_ARGB8888_PREMULTIPLIED
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_ATTACH_BUFFER
            e.attach_buffer = a
        case .commit(let bufferID, let damage, let frame):
            let c = message(Remoteview__Commit.self, remoteview__commit__init)
            c.pointee.buffer_id = bufferID
            c.pointee.frame = frame
            if !damage.isEmpty {
                let rects = allocate(MemoryLayout<UnsafeMutablePointer<Remoteview__Rect>?>.stride * damage.count)
                    .bindMemory(to: UnsafeMutablePointer<Remoteview__Rect>?.self, capacity: damage.count)
                for (index, rect) in damage.enumerated() {
                    let r = message(Remoteview__Rect.self, remoteview__rect__init)
                    r.pointee.x = Int32(rect.x)
                    r.pointee.y = Int32(rect.y)
                    r.pointee.width = UInt32(rect.width)
                    r.pointee.height = UInt32(rect.height)
                    rects[index] = r
                }
                c.pointee.n_damage = damage.count
                c.pointee.damage = rects
            }
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_COMMIT
            e.commit = c
        case .releaseBuffer(let id):
            let r = message(Remoteview__ReleaseBuffer.self, remoteview__release_buffer__init)
            r.pointee.buffer_id = id
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_RELEASE_BUFFER
            e.release_buffer = r
        case .frameDone(let frame):
            let f = message(Remoteview__FrameDone.self, remoteview__frame_done__init)
            f.pointee.frame = frame
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_FRAME_DONE
            e.frame_done = f
        case .destroyBuffer(let id):
            let d = message(Remoteview__DestroyBuffer.self, remoteview__destroy_buffer__init)
            d.pointee.buffer_id = id
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_DESTROY_BUFFER
            e.destroy_buffer = d
        case .resize(let size):
            let r = message(Remoteview__Resize.self, remoteview__resize__init)
            r.pointee.width = UInt32(size.width)
            r.pointee.height = UInt32(size.height)
            r.pointee.scale_permille = UInt32(size.scalePermille)
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_RESIZE
            e.resize = r
        case .preferredSize(let width, let height):
            let p = message(Remoteview__PreferredSize.self, remoteview__preferred_size__init)
            p.pointee.width = UInt32(width)
            p.pointee.height = UInt32(height)
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_PREFERRED_SIZE
            e.preferred_size = p
        case .restorableState(let state):
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_RESTORABLE_STATE
            e.restorable_state = encode(state)
        case .restoreState(let state):
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_RESTORE_STATE
            e.restore_state = encode(state)
        case .focusLeave(let direction):
            let f = message(Remoteview__FocusLeave.self, remoteview__focus_leave__init)
            f.pointee.direction = direction.wire
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_FOCUS_LEAVE
            e.focus_leave = f
        case .accessibilityUpdate(let update):
            let u = message(Remoteview__AccessibilityUpdate.self, remoteview__accessibility_update__init)
            u.pointee.root = update.root
            u.pointee.focus = update.focus
            u.pointee.whole = update.whole ? 1 : 0
            u.pointee.more = update.more ? 1 : 0
            if !update.nodes.isEmpty {
                let nodes = allocate(MemoryLayout<UnsafeMutablePointer<Remoteview__AccessibilityNode>?>.stride * update.nodes.count)
                    .bindMemory(to: UnsafeMutablePointer<Remoteview__AccessibilityNode>?.self, capacity: update.nodes.count)
                for (index, node) in update.nodes.enumerated() { nodes[index] = encode(node) }
                u.pointee.n_nodes = update.nodes.count
                u.pointee.nodes = nodes
            }
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_ACCESSIBILITY_UPDATE
            e.accessibility_update = u
        case .accessibilityAction(let wire):
            let a = message(Remoteview__AccessibilityAction.self, remoteview__accessibility_action__init)
            a.pointee.node = wire.node
            switch wire.action {
            case .press: a.pointee.action = REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_PRESS
            case .focus: a.pointee.action = REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_FOCUS
            case .setText(let text):
                a.pointee.action = REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_SET_VALUE
                if !text.isEmpty { a.pointee.text = string(text) }
            case .setNumber(let number):
                a.pointee.action = REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_SET_VALUE
                a.pointee.number = number
                a.pointee.has_number = 1
            case .increment: a.pointee.action = REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_INCREMENT
            case .decrement: a.pointee.action = REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_DECREMENT
            case .scrollIntoView: a.pointee.action = REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_SCROLL_INTO_VIEW
            }
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_ACCESSIBILITY_ACTION
            e.accessibility_action = a
        }
    }

    /// One node's message (its frame as the wire's floats).
    private func encode(_ node: AccessibilityNodeDescription) -> UnsafeMutablePointer<Remoteview__AccessibilityNode> {
        let n = message(Remoteview__AccessibilityNode.self, remoteview__accessibility_node__init)
        n.pointee.id = node.id
        n.pointee.role = Remoteview__AccessibilityRole(rawValue: node.role.rawValue)
        if !node.label.isEmpty { n.pointee.label = string(node.label) }
        if !node.value.isEmpty { n.pointee.value = string(node.value) }
        n.pointee.states = node.states.intersection(.wire).rawValue
        n.pointee.actions = node.actions.intersection(.wire).rawValue
        n.pointee.x = Float(node.frame.x)
        n.pointee.y = Float(node.frame.y)
        n.pointee.width = Float(node.frame.width)
        n.pointee.height = Float(node.frame.height)
        if !node.children.isEmpty {
            let children = allocate(MemoryLayout<UInt32>.stride * node.children.count).bindMemory(to: UInt32.self, capacity: node.children.count)
            for (index, child) in node.children.enumerated() { children[index] = child }
            n.pointee.n_children = node.children.count
            n.pointee.children = children
        }
        if let range = node.range {
            n.pointee.has_range = 1
            n.pointee.range_min = range.minimum
            n.pointee.range_max = range.maximum
            n.pointee.range_value = range.value
        }
        return n
    }

    /// A state's message: its bytes inline, or its memfd's size.
    private func encode(_ state: RestorableStateWire) -> UnsafeMutablePointer<Remoteview__RestorableState> {
        let s = message(Remoteview__RestorableState.self, remoteview__restorable_state__init)
        switch state {
        case .inline(let bytes) where !bytes.isEmpty:
            s.pointee.data = data(bytes)
        case .inline:
            break
        case .memfd(let size):
            s.pointee.size = UInt64(size)
        }
        return s
    }
}
