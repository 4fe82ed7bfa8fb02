// Text through Pango: shaping (Arabic contextual forms and the lam-alef ligature), bidi order,
// natural alignment, fallback, and the fonts Font names. What the toolkit draws is what these
// layouts say (TextLayout is the one place text is laid out).
@testable import RemoteService
import RemoteHost
import Testing

@Suite("Text shaping and direction (Pango)")
@MainActor
struct TextShapingTests {
    static let font = Font(size: 20)

    /// The glyph Pango gives the character at UTF-8 offset `byte` of `text`, laid out alone.
    static func glyph(atByte byte: Int, of text: String) -> UInt32? {
        for run in TextLayout.make(text, font: font).runs {
            for (index, cluster) in run.clusters.enumerated() where run.byteOffset + cluster == byte { return run.glyphs[index] }
        }
        return nil
    }

    @Test("Arabic letters are joined: each letter of بيت is drawn in its contextual form, another glyph than the same letter alone")
    func arabicJoining() throws {
        let word = "بيت"  // beh (initial), yeh (medial), teh (final)
        let layout = TextLayout.make(word, font: Self.font)
        #expect(layout.unknownGlyphs == 0, "a font with Arabic is installed (DejaVu Sans has it)")
        #expect(layout.runs.count == 1 && layout.runs[0].level % 2 == 1, "one right-to-left run: \(layout.runs)")
        var byte = 0
        for letter in word {
            let joined = try #require(Self.glyph(atByte: byte, of: word))
            let alone = try #require(Self.glyph(atByte: 0, of: String(letter)))
            #expect(joined != alone, "\(letter) at byte \(byte): glyph \(joined) joined, \(alone) alone")
            byte += letter.utf8.count
        }
    }

    @Test("lam and alef become one glyph, the lam-alef ligature: two code points, one cluster")
    func lamAlef() {
        let runs = TextLayout.make("لا", font: Self.font).runs
        #expect(runs.count == 1 && runs[0].glyphs.count == 1, "\(runs)")
        #expect(runs.first?.clusters == [0])
    }

    @Test("a right-to-left run is laid out in order: the first Hebrew letter is rightmost, and in mixed text the Hebrew follows the Latin")
    func rightToLeftOrder() {
        let hebrew = TextLayout.make("שלום", font: Self.font)
        let positions = (0..<4).map { hebrew.position(ofCharacter: $0) }
        let lefts = positions.map { min($0.x, $0.x + $0.width) }
        #expect(lefts == lefts.sorted(by: >), "each letter left of the one before it: \(lefts)")

        let mixed = TextLayout.make("abc שלום", font: Self.font)
        #expect(!mixed.isRightToLeft, "the first strong character is Latin")
        let c = mixed.position(ofCharacter: 2), shin = mixed.position(ofCharacter: 4), mem = mixed.position(ofCharacter: 7)
        #expect(c.x < min(shin.x, shin.x + shin.width), "the Hebrew word comes after abc")
        #expect(min(mem.x, mem.x + mem.width) < min(shin.x, shin.x + shin.width), "and within it, its last letter is leftmost")
    }

    @Test("natural alignment is the leading edge: a right-to-left paragraph sits at the right, a left-to-right one at the left; .left and .right are the view's edges")
    func naturalAlignment() {
        let width = 300.0
        let hebrew = TextLayout.make("שלום עולם", font: Self.font, width: width, alignment: .natural)
        #expect(hebrew.isRightToLeft)
        let rect = hebrew.logicalRect
        #expect(abs(rect.maxX - width) < 1, "right-aligned: \(rect)")
        #expect(TextLayout.make("שלום עולם", font: Self.font, width: width, alignment: .left).logicalRect.minX < 1)
        #expect(TextLayout.make("hello", font: Self.font, width: width, alignment: .natural).logicalRect.minX < 1)
        let right = TextLayout.make("hello", font: Self.font, width: width, alignment: .right).logicalRect
        #expect(abs(right.maxX - width) < 1)
    }

    @Test("a label's default alignment is natural, and a label cut at its last line keeps each line's direction (the text up to that line, not lines joined)")
    func labelDefault() throws {
        #expect(Label(text: "مرحبا").alignment == .natural)
        let font = Font(size: 15)
        let text = "שלום עולם abc def שלום עולם ghi jkl שלום עולם mno pqr"
        let width = TextMeasure.width(of: "שלום עולם abc def", font: font) + 2
        let lines = TextMeasure.lines(of: text, font: font, width: width, maxLines: 2)
        #expect(lines.count == 2 && lines[1].hasSuffix("…"), "\(lines)")
        // Every line of the paragraph is right to left, the continuation included.
        let cut = TextLayout.make(text, font: font, width: width)
        #expect(cut.isRightToLeft && cut.lineCount > 2)
    }

    @Test(".left and .right are the view's edges for a right-to-left paragraph that starts with digits, and for Hebrew")
    func edgesForRightToLeft() {
        let width = 300.0
        let digitsFirst = TextLayout.make("3 הודעות חדשות", font: Self.font, width: width, alignment: .left)
        #expect(digitsFirst.isRightToLeft, "its first strong character is Hebrew")
        #expect(digitsFirst.logicalRect.minX < 1, "\(digitsFirst.logicalRect)")
        let right = TextLayout.make("שלום", font: Self.font, width: width, alignment: .right).logicalRect
        #expect(abs(right.maxX - width) < 1, "\(right)")
        let natural = TextLayout.make("3 הודעות", font: Self.font, width: width).logicalRect
        #expect(abs(natural.maxX - width) < 1, "natural: the leading edge of a right-to-left paragraph: \(natural)")
    }

    @Test("clicks land where they fall (xy_to_index): past either end of left-to-right and right-to-left text, and on a Hebrew letter's halves")
    func clicks() {
        let latin = TextLayout.make("abc", font: Self.font)
        #expect(latin.characterIndex(atX: -20) == 0 && latin.characterIndex(atX: 500) == 3)
        let hebrew = TextLayout.make("שלום", font: Self.font)
        #expect(hebrew.characterIndex(atX: 500) == 0, "right of Hebrew text is its logical start")
        #expect(hebrew.characterIndex(atX: -20) == 4, "left of it, its end")
        let shin = hebrew.position(ofCharacter: 0)
        let left = min(shin.x, shin.x + shin.width), right = max(shin.x, shin.x + shin.width)
        #expect(hebrew.characterIndex(atX: right - 1) == 0, "the right half of ש: before it")
        #expect(hebrew.characterIndex(atX: left + 1) == 1, "its left half: after it")
    }

    @Test("left and right arrows move the caret on screen (Pango's visual movement): in Hebrew, left goes on through the word; a selection's highlight covers the selected letters")
    func arrowsInHebrew() {
        let field = TextField(text: "שלום", font: Self.font)
        field.selection = 0..<0
        field.keyDown(KeyEvent(down: true, keyCode: KeyCode.left))
        #expect(field.selection == 1..<1, "left from the start of Hebrew text goes to after its first letter: \(field.selection)")
        field.keyDown(KeyEvent(down: true, keyCode: KeyCode.right))
        #expect(field.selection == 0..<0)
        field.keyDown(KeyEvent(down: true, keyCode: KeyCode.right))
        #expect(field.selection == 0..<0, "the right end of Hebrew text stops the caret")
        let latin = TextField(text: "abc", font: Self.font)
        latin.selection = 1..<1
        latin.keyDown(KeyEvent(down: true, keyCode: KeyCode.left))
        #expect(latin.selection == 0..<0)
        // "abc שלום": characters 2..<6 are c, the space, ש and ל; their pieces on screen.
        let mixed = TextLayout.make("abc שלום", font: Self.font)
        let pieces = mixed.xRanges(ofCharacters: 2..<6)
        let covered = pieces.reduce(0) { $0 + $1.maxX - $1.minX }
        let expected = (2..<6).reduce(0.0) { $0 + abs(mixed.position(ofCharacter: $1).width) }
        #expect(abs(covered - expected) < 0.5 && pieces.count == 2, "\(pieces)")
    }

    @Test("lines break by Pango's rules and a cut text ends in …; a caret in Hebrew stands at the right before the first letter")
    func linesAndCaret() {
        let width = TextMeasure.width(of: "hello world", font: Self.font) + 1
        #expect(TextMeasure.lines(of: "hello world hello world", font: Self.font, width: width) == ["hello world", "hello world"])
        let field = TextField(text: "שלום", font: Self.font)
        field.frame = Rect(x: 0, y: 0, width: 300, height: 40)
        #expect(field.offset(ofCharacter: 0) > field.offset(ofCharacter: 4), "logical start at the right: \(field.offset(ofCharacter: 0)), \(field.offset(ofCharacter: 4))")
        #expect(abs(field.offset(ofCharacter: 0) - (300 - 8)) < 1, "a right-to-left field starts at its right edge (inside its padding): \(field.offset(ofCharacter: 0))")
        let latin = TextField(text: "abc", font: Self.font)
        latin.frame = Rect(x: 0, y: 0, width: 300, height: 40)
        #expect(abs(latin.offset(ofCharacter: 0) - 8) < 0.01)
    }

    @Test("Font takes a family (or a list), a fontconfig-style :lang=, or a Pango font description")
    func fonts() {
        let japanese = Font(family: "sans-serif:lang=ja", size: 14)
        #expect(japanese.family == "sans-serif" && japanese.language == "ja")
        let described = Font(description: "DejaVu Sans Bold 14")
        #expect(described.family == "DejaVu Sans" && described.size == 14 && described.weight == .bold)
        let plain = Font(description: "Serif")
        #expect(plain.family == "Serif" && plain.size == 15 && plain.weight == .regular)
    }

    // MARK: fonts (scripts/bootstrap installs Noto core, CJK and colour emoji, and IPAGothic)

    @Test("👍🏽 (a thumb and a skin tone) is one glyph and one cluster, and one character of a field")
    func emojiCluster() {
        let layout = TextLayout.make("👍🏽", font: Self.font)
        #expect(layout.unknownGlyphs == 0, "a colour emoji font is installed (fonts-noto-color-emoji)")
        let glyphs = layout.runs.flatMap(\.glyphs)
        #expect(glyphs.count == 1 && layout.runs.flatMap(\.clusters) == [0], "\(layout.runs)")
        #expect(layout.runFamilies == ["Noto Color Emoji"], "\(layout.runFamilies)")
        #expect("👍🏽".count == 1 && layout.characterIndex(ofByte: "👍🏽".utf8.count) == 1)
    }

    @Test("こんにちは draws in a font that has kana, not boxes; :lang=ja picks a Japanese face, :lang=zh-cn the Chinese one")
    func cjk() {
        let hello = TextLayout.make("こんにちは", font: Self.font)
        #expect(hello.unknownGlyphs == 0, "fonts-noto-cjk is installed")
        #expect(!hello.runFamilies.isEmpty && !hello.runFamilies.contains("DejaVu Sans"), "a font with kana, by fallback: \(hello.runFamilies)")
        // 骨 has different Japanese and Chinese forms: the language picks the face.
        let japanese = TextLayout.make("骨", font: Font(family: "sans-serif:lang=ja", size: 20)).runFamilies
        let chinese = TextLayout.make("骨", font: Font(family: "sans-serif:lang=zh-cn", size: 20)).runFamilies
        let japaneseFace = japanese.first.map { $0.contains("JP") || $0 == "IPAGothic" } ?? false
        #expect(japaneseFace && chinese.first?.contains("SC") == true, "ja: \(japanese), zh-cn: \(chinese)")
    }

    @Test("a label in IPAGothic is drawn in IPAGothic (the family really resolved), and lays out beside labels in other fonts")
    func ipaGothic() {
        let layout = TextLayout.make("こんにちは IPA", font: Font(family: "IPAGothic", size: 16))
        #expect(layout.runFamilies.allSatisfy { $0 == "IPAGothic" }, "fonts-ipafont-gothic is installed: \(layout.runFamilies)")
        let headline = Label(text: "New Note", font: .headline), ipa = Label(text: "こんにちは", font: Font(family: "IPAGothic", size: 16))
        let before = headline.sizeThatFits(Size(width: 300, height: 100))
        let ipaSize = ipa.sizeThatFits(Size(width: 300, height: 100))
        #expect(ipaSize.width > 0 && ipaSize.height > 0 && headline.sizeThatFits(Size(width: 300, height: 100)) == before,
                "IPAGothic leaves other labels' layout as it was: \(before), \(ipaSize)")
    }

    @Test("colour emoji draw in colour (Cairo 1.16 with Noto Color Emoji's bitmaps)")
    func emojiInColour() throws {
        let bitmap = try Bitmap(width: 48, height: 48) { context in
            context.fill(Rect(x: 0, y: 0, width: 48, height: 48), with: .white)
            context.draw("👍🏽", at: Point(x: 4, y: 36), font: Font(size: 32), color: .black)
        }
        let image = try RemoteImage(pngData: try bitmap.pngData())
        var coloured = 0
        for y in 0..<48 {
            for x in 0..<48 {
                let word = image.pixel(x: x, y: y)
                let r = Int((word >> 16) & 0xFF), g = Int((word >> 8) & 0xFF), b = Int(word & 0xFF)
                if max(r, g, b) - min(r, g, b) > 40 { coloured += 1 }
            }
        }
        #expect(coloured > 100, "pixels with colour: \(coloured)")
    }

    @Test("backspace follows Pango: 👍🏽 and é (e and an accent) go whole, an Arabic letter's vowel mark goes alone, Hebrew letter by letter")
    func backspace() {
        func afterBackspace(_ text: String) -> String {
            let field = TextField(text: text, font: Self.font)
            field.selection = text.count..<text.count
            field.keyDown(KeyEvent(down: true, keyCode: KeyCode.backspace))
            return field.text
        }
        #expect(afterBackspace("a👍🏽") == "a")
        #expect(afterBackspace("ae\u{301}") == "a")
        #expect(afterBackspace("\u{628}\u{64E}") == "\u{628}", "ba with fatha: the fatha alone")
        #expect(afterBackspace("שלום") == "שלו")
    }
}
