// The layout the demo's share activities share: a heading at the top, the activity's content
// in the middle, and a row of buttons along the bottom. Its geometry follows from the view's
// size alone, so a script (and the built-in demo scripts) can find the buttons.
import RemoteService

/// The sheet's geometry, in points, for a view of a given size.
enum SheetLayout {
    static let margin = 16.0
    static let spacing = 12.0
    static let headingHeight = 28.0
    static let buttonHeight = 40.0

    /// Where the heading is.
    static func heading(in size: Size) -> Rect {
        Rect(x: margin, y: margin, width: max(0, size.width - 2 * margin), height: headingHeight)
    }

    /// Where the row of buttons is.
    static func buttons(in size: Size) -> Rect {
        Rect(x: margin, y: max(0, size.height - margin - buttonHeight), width: max(0, size.width - 2 * margin), height: buttonHeight)
    }

    /// Where the content is: between the heading and the buttons.
    static func content(in size: Size) -> Rect {
        let top = margin + headingHeight + spacing
        return Rect(x: margin, y: top, width: max(0, size.width - 2 * margin), height: max(0, buttons(in: size).minY - spacing - top))
    }

    /// The centre of button `index` (from the left) of a row of `count`.
    static func buttonCenter(_ index: Int, of count: Int, in size: Size) -> Point {
        let row = buttons(in: size)
        let width = (row.width - spacing * Double(count - 1)) / Double(count)
        return Point(x: row.minX + (width + spacing) * Double(index) + width / 2, y: row.midY)
    }
}

/// A demo activity's root view: heading, content and buttons, laid out by ``SheetLayout`` on
/// the traits' background.
final class SheetView: View {
    let heading: Label
    let content: View
    let buttonRow: StackView

    init(title: String, content: View, buttons: [Button]) {
        heading = Label(text: title, font: .headline)
        self.content = content
        buttonRow = StackView(axis: .horizontal, spacing: SheetLayout.spacing, distribution: .fillEqually, arrangedSubviews: buttons)
        super.init()
        for view in [heading, content, buttonRow] { addSubview(view) }
    }

    override func layoutSubviews() {
        heading.frame = SheetLayout.heading(in: bounds.size)
        content.frame = SheetLayout.content(in: bounds.size)
        buttonRow.frame = SheetLayout.buttons(in: bounds.size)
    }

    override func traitsDidChange() {
        backgroundColor = traits.backgroundColor
        super.traitsDidChange()
    }
}
