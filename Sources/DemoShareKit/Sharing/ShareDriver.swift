// Runs one share headless: presents the activity's view, reports its updates, drives it with a
// script, and waits for the outcome; every wait has a deadline and is woken by the event.
import RemoteHost

struct ShareDriver {
    let session: ShareSession
    let log: UpdateLog
    let reporter: ShareReporter
    /// Where `snapshot NAME` writes NAME.png.
    let snapshotFolder: String?
    /// How long each wait may take.
    let timeout: Duration
    /// Pixels per 1000 points, kept when the script resizes the view.
    let scalePermille: Int

    /// A script step that failed, naming its line.
    struct StepFailed: Error, CustomStringConvertible {
        var description: String
    }

    /// Runs `script`'s lines in order.
    ///
    /// - Throws: ``StepFailed`` naming the line and what went wrong.
    func run(_ script: ShareScript) async throws(StepFailed) {
        var cursor = 0
        for line in script.lines {
            reporter.note("› \(line.text)")
            do {
                try await perform(line.command, cursor: &cursor)
            } catch let error as StepFailed {
                throw StepFailed(description: "\(script.source):\(line.number): \(line.text): \(error.description)")
            } catch let error as RemoteError {
                throw StepFailed(description: "\(script.source):\(line.number): \(line.text): \(error.reason)")
            } catch {
                throw StepFailed(description: "\(script.source):\(line.number): \(line.text): \(error)")
            }
        }
    }

    private func perform(_ command: ShareScript.Command, cursor: inout Int) async throws {
        let view = session.view
        switch command {
        case .click(let point):
            try await view.click(x: point.x, y: point.y)
        case .clickControl(let control):
            let node = try await view.accessibility.node(role: control.role, label: control.name, timeout: timeout)
            let (x, y) = node.frameInPoints.center
            reporter.note("  \(control) at \(Int(x.rounded())) \(Int(y.rounded()))")
            try await view.click(x: x, y: y)
        case .press(let control):
            let node = try await view.accessibility.node(role: control.role, label: control.name, timeout: timeout)
            try await view.accessibility.perform(.press, on: node.id)
        case .typeInto(let field, let text):
            let node = try await view.accessibility.node(role: .textField, label: field, timeout: timeout)
            try await view.accessibility.perform(.focus, on: node.id)
            try await view.type(text)
        case .type(let text):
            try await view.type(text)
        case .key(let code, let modifiers):
            try await view.press(keyCode: code, modifiers: modifiers)
        case .drag(let from, let to, let steps):
            try await view.send(.pointer(PointerEvent(.down, x: from.x, y: from.y, button: 1, buttons: 1)))
            for step in 1...steps {
                let t = Double(step) / Double(steps)
                try await view.send(.pointer(PointerEvent(.moved, x: from.x + (to.x - from.x) * t, y: from.y + (to.y - from.y) * t, buttons: 1)))
            }
            try await view.send(.pointer(PointerEvent(.up, x: to.x, y: to.y, button: 1)))
        case .wait(let state):
            switch try await first(state, from: cursor) {
            case .update(let index): cursor = index + 1
            case .ended: throw StepFailed(description: "the share ended (\(session.currentOutcome?.result ?? "?")) before an update in state \(state)")
            }
        case .waitOutcome:
            _ = try await first(nil, from: cursor)
        case .snapshot(let name):
            guard let snapshotFolder else { throw StepFailed(description: "snapshot needs --snapshot DIR") }
            try await view.settle(timeout: timeout)
            let path = "\(snapshotFolder)/\(name).png"
            try view.snapshot(to: path)
            reporter.note("  wrote \(path) (\(view.image.width)×\(view.image.height) pixels)")
        case .cancel:
            let outcome = await session.cancel(reason: "cancelled by the script")
            reporter.note("  the activity answered the cancel: \(outcome.result)")
        case .resize(let width, let height):
            try await view.present(width: width, height: height, scalePermille: scalePermille)
        case .style(let style):
            try await view.setTraits(Traits(style: style))
        }
    }

    /// Presents the view at `width` × `height` points, focused, as a share sheet shows it.
    func present(width: Int, height: Int) async throws(RemoteError) {
        try await session.view.present(width: width, height: height, scalePermille: scalePermille)
        try await session.view.send(.focus(true))
    }

    /// The first update in `state` from `cursor` (or the end), within ``timeout``.
    func first(_ state: ActivityState?, from cursor: Int) async throws(StepFailed) -> UpdateLog.Found {
        do {
            return try await log.first(state, from: cursor, until: .now.advanced(by: timeout))
        } catch {
            let last = log.updates.last.map { "the last was \($0)" } ?? "none came"
            let what = state.map { "no update in state \($0)" } ?? "no outcome"
            throw StepFailed(description: "\(what) within \(timeout) (\(last))")
        }
    }
}
