/// Plain-text layout shared by the commands: display widths and word wrapping.
///
/// Widths are terminal columns: East Asian wide characters (the Chinese
/// titles of the demos' sources) take two, everything else the commands
/// print takes one.
enum TextLayout {
    /// The width the commands keep their lines to, where they can.
    static let lineWidth = 100

    /// The number of terminal columns `text` takes.
    ///
    /// - Complexity: O(n) in the length of `text`.
    static func displayWidth(_ text: some StringProtocol) -> Int {
        var width = 0
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x0300...0x036F, 0x200B...0x200F, 0xFE00...0xFE0F: break  // combining, zero width
            case 0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF,
                 0xA000...0xA4CF, 0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60,
                 0xFFE0...0xFFE6, 0x20000...0x3FFFD:
                width += 2
            default: width += 1
            }
        }
        return width
    }

    /// `text` padded with spaces to `width` columns (on the left when
    /// `right` is true); text already that wide is returned unchanged.
    static func pad(_ text: String, to width: Int, right: Bool = false) -> String {
        let padding = String(repeating: " ", count: max(0, width - displayWidth(text)))
        return right ? padding + text : text + padding
    }

    /// `text` broken at spaces into lines of at most `width` columns. The
    /// first line starts with `first`, the others with `rest`. A word longer
    /// than a line stays whole, on a line of its own.
    static func wrap(_ text: String, width: Int = lineWidth, first: String = "", rest: String = "") -> [String] {
        var lines: [String] = []
        var line = first
        var lineHasWord = false
        for word in text.split(separator: " ", omittingEmptySubsequences: true) {
            let candidate = lineHasWord ? line + " " + word : line + word
            if lineHasWord, displayWidth(candidate) > width {
                lines.append(line)
                line = rest + word
            } else {
                line = candidate
            }
            lineHasWord = true
        }
        lines.append(line)
        return lines
    }
}
