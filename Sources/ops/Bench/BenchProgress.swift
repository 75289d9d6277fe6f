import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The status line of `ops bench` on a terminal: "row k of n", the row's id,
/// the time so far and an estimate of the time left. It stays on one line,
/// rewritten in place, and is erased before anything else is printed, so
/// the report itself is the same as when standard output is a pipe or a file
/// (where there is no status line at all).
final class BenchProgress: Sendable {
    /// Whether a status line is on screen now.
    private let showing = Mutex(false)

    /// A status line for standard output, or nil when it is not a terminal.
    static func forStandardOutput() -> BenchProgress? {
        isatty(1) == 1 ? BenchProgress() : nil
    }

    private init() {}

    /// Shows "row `row` of `count`", replacing the line shown before.
    func show(row: Int, of count: Int, id: String, elapsedSeconds: Double, leftSeconds: Double) {
        var text = "row \(row) of \(count) (\(id)), \(benchSpan(elapsedSeconds)) so far"
        if row > 1 || leftSeconds > 0 { text += ", about \(benchSpan(leftSeconds)) left" }
        // Short enough never to wrap, or "\r" could not erase it.
        if text.count > 79 { text = String(text.prefix(78)) + "…" }
        showing.withLock { showing in
            Self.emit("\r\u{1B}[K" + text)
            showing = true
        }
    }

    /// Erases the status line, if one is shown.
    func clear() {
        showing.withLock { showing in
            guard showing else { return }
            Self.emit("\r\u{1B}[K")
            showing = false
        }
    }

    /// Writes straight to standard output, after whatever `print` buffered.
    private static func emit(_ text: String) {
        fflush(nil)
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeMutableBytes { write(1, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 {
                if errno == EINTR { continue }
                return
            }
            offset += written
        }
    }
}
