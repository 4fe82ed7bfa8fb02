import RemoteHost
import RemoteTestSupport
import Testing

/// The semantic tree across processes: the fixture's screen (a title, a status, "Add", a text
/// field "Type here", a progress, a canvas, a hidden button) as a sandboxed service shows it, read
/// through `RemoteView.accessibility`, and acted on through it. Every wait is for a tree change,
/// under a deadline.
@Suite("The semantic tree across processes")
struct AccessibilityTests {
    typealias Screen = RemoteViewInputTests.Screen

    @Test("a tree arrives after the first frame: roles, labels, values and frames as the service's views say; the hidden button is not in it; the focus is nothing; each frame lies inside the view")
    func treeArrives() async throws {
        try await RemoteViewInputTests.withScreen { view, _ in
            let tree = try await waitForTree(view)
            let roles = tree.nodesInOrder.map { "\($0.node.role) \($0.node.label)" }
            #expect(roles == ["group ", "label Counter", "label count 0", "button Add", "text field Type here", "progress ", "canvas "], "\(tree.dump)")
            let add = try #require(tree.first(role: .button, label: "Add"))
            #expect(add.actions.contains(.press) && add.actions.contains(.focus) && add.states.contains(.focusable))
            let field = try #require(tree.first(role: .textField, label: "Type here"))
            #expect(field.states.contains(.editable) && field.actions.contains(.setValue) && field.value.isEmpty)
            let progress = try #require(tree.first(role: .progress))
            #expect(progress.range == AccessibilityRange(minimum: 0, maximum: 1, value: 0) && progress.value == "0 %")
            #expect(tree.first(label: "Hidden") == nil, "a hidden view is not in the tree")
            #expect(tree.focus == nil)
            for (_, node) in tree.nodesInOrder {
                #expect(node.frame.x >= 0 && node.frame.y >= 0 && node.frame.x + node.frame.width <= Double(RemoteViewInputTests.width)
                        && node.frame.y + node.frame.height <= Double(RemoteViewInputTests.height), "\(node)")
            }
            #expect(tree.rootNode?.frame == AccessibilityFrame(x: 0, y: 0, width: Double(RemoteViewInputTests.width), height: Double(RemoteViewInputTests.height)))
        }
    }

    @Test("typing changes one node: each keystroke's update carries only the text field, with its new value")
    func typingSendsOneNode() async throws {
        try await RemoteViewInputTests.withScreen { view, _ in
            _ = try await waitForTree(view)
            let field = try #require(view.accessibility.tree.first(role: .textField))
            try await view.accessibility.perform(.focus, on: field.id)
            _ = try await view.accessibility.node(describedAs: "the field focused") { $0.focusedNode?.id == field.id ? $0.focusedNode : nil }
            // One keystroke at a time (two typed at once may share a frame, and so an update).
            for (typed, value) in [("h", "h"), ("i", "hi")] {
                let changes = view.accessibility.changes()
                try await view.type(typed)
                let change = try await withDeadline(.seconds(10), "the update after typing \(typed)") { await changes.first { _ in true } }
                #expect(change?.changed == [field.id], "only the field changed: \(String(describing: change?.changed))")
                #expect(change?.removed.isEmpty == true && change?.isWhole == false)
                #expect(change?.tree[field.id]?.value == value)
            }
        }
    }

    @Test("actions go back to the service: press runs the button's action, set value replaces the field's text (onChange hears of it), focus moves the first responder; an action a node does not take is refused by the host")
    func actions() async throws {
        try await RemoteViewInputTests.withScreen { view, screen in
            let tree = try await waitForTree(view)
            let add = try #require(tree.first(role: .button, label: "Add"))
            let field = try #require(tree.first(role: .textField, label: "Type here"))
            try await view.accessibility.perform(.press, on: add.id)
            _ = try await view.accessibility.node(role: .label, label: "count 1")
            #expect(try await screen.state()["count"] == "1")
            try await view.accessibility.perform(.setText("héllo שלום"), on: field.id)
            let edited = try await view.accessibility.node(describedAs: "the field's new text") { $0[field.id]?.value == "héllo שלום" ? $0[field.id] : nil }
            #expect(edited.role == .textField)
            #expect(try await screen.state()["log"]?.hasSuffix("changed héllo שלום") == true)
            try await view.accessibility.perform(.focus, on: add.id)
            _ = try await view.accessibility.node(describedAs: "Add focused") { $0.focusedNode?.id == add.id ? $0.focusedNode : nil }
            #expect(try await screen.state()["focused"] == "button")
            await #expect(throws: RemoteError.self) { try await view.accessibility.perform(.press, on: tree.first(role: .progress)!.id) }
            await #expect(throws: RemoteError.self) { try await view.accessibility.perform(.press, on: 999_999) }
        }
    }

    @Test("frames are in the host's pixels: at scale 2 every frame doubles, and a new size gives the whole tree anew")
    func scaleApplies() async throws {
        try await RemoteViewInputTests.withScreen { view, _ in
            let before = try await waitForTree(view)
            let add = try #require(before.first(role: .button, label: "Add"))
            let changes = view.accessibility.changes()
            try await view.present(width: RemoteViewInputTests.width, height: RemoteViewInputTests.height, scalePermille: 2000)
            let change = try await withDeadline(.seconds(10), "the tree at scale 2") { await changes.first { _ in true } }
            #expect(change?.isWhole == true)
            let scaled = try #require(change?.tree[add.id])
            #expect(scaled.frame == AccessibilityFrame(x: add.frame.x * 2, y: add.frame.y * 2, width: add.frame.width * 2, height: add.frame.height * 2))
            #expect(scaled.frameInPoints == add.frameInPoints)
        }
    }

    @Test("after kill -9 the next process sends its whole tree: the old tree stays published until then, and the new one replaces it (new ids, the old ones removed)")
    func relaunch() async throws {
        try await RestorableStateTests.withScreen { view, events in
            let before = try await waitForTree(view)
            let changes = view.accessibility.changes()
            let killed = try await RestorableStateTests.kill9(view, events)
            #expect(view.accessibility.tree.count == before.count, "the old tree stays until the new one comes")
            // The next request relaunches it; its first update is whole.
            #expect(try await view.connection.request(ServiceMessage(type: "echo", text: "back")).text == "back")
            #expect(view.connection.processIdentifier != killed)
            let change = try await withDeadline(.seconds(10), "the new process's tree") { await changes.first { $0.isWhole } }
            let after = try #require(change?.tree)
            #expect(after.nodes(role: .button, label: "Add").count == 1 && after.count == before.count, "\(after.dump)")
            #expect(Set(change?.removed ?? []) == Set(before.nodesInOrder.map(\.node.id)).subtracting(after.nodesInOrder.map(\.node.id)))
        }
    }

    @Test("a host that does not read trees (readsAccessibility off) is sent none")
    func hostThatDoesNotRead() async throws {
        var configuration = fastLauncherConfiguration()
        configuration.readsAccessibility = false
        try await RemoteViewInputTests.withScreen(configuration: configuration) { view, _ in
            try await view.settle()
            #expect(view.accessibility.tree.isEmpty)
            await #expect(throws: RemoteError.self) { try await view.accessibility.node(role: .button, timeout: .milliseconds(200)) }
        }
    }

    /// The first tree the view receives.
    func waitForTree(_ view: RemoteView) async throws -> AccessibilityTree {
        _ = try await view.accessibility.node(role: .button, label: "Add")
        return view.accessibility.tree
    }
}
