import Dispatch
import Synchronization

/// The ordered record of one demo: every line it prints, with the thread that
/// printed it, plus the checks that judge the record.
///
/// Lines are recorded and printed under one lock, so the printed order is the
/// recorded order. A line recorded by a thread after an event (for example a
/// state-change observer) always comes after every line recorded before that
/// event caused it, so ordering checks that follow cause and effect are
/// deterministic; checks never depend on how unrelated threads interleave.
final class DemoLog: Sendable {
    /// One recorded line.
    struct Entry: Sendable {
        /// Position in the whole demo.
        let index: Int
        /// The name of the thread that recorded it (see ``ThreadInfo``).
        let thread: String
        /// The text, e.g. `bp1 isExecuting NO→YES` or `enter bp1`.
        let text: String
        /// Whether the line reports an observed state change.
        let isStateChange: Bool
    }

    private struct Record {
        var entries: [Entry] = []
        var sectionStart = 0
        var failures: [String] = []
        var checks = 0
    }

    private let record = Mutex(Record())

    /// Width of the thread column.
    private static let threadColumn = 14

    // MARK: Recording

    /// Records and prints a line of what happens, tagged with the calling thread.
    func note(_ text: String) {
        append(text, isStateChange: false)
    }

    /// Records and prints an observed state change, e.g. `op isReady YES→NO`.
    func stateChange(_ text: String) {
        append(text, isStateChange: true)
    }

    private func append(_ text: String, isStateChange: Bool) {
        let thread = ThreadInfo.label()
        record.withLock { record in
            record.entries.append(Entry(index: record.entries.count, thread: thread, text: text, isStateChange: isStateChange))
            Console.line("  " + Self.padded(thread) + text)
        }
    }

    /// Prints a line that is not part of the record (headers, explanations).
    func say(_ text: String) {
        record.withLock { _ in Console.line(text) }
    }

    /// Starts a numbered part of the demo. Checks that search the record
    /// look only at lines recorded since the section began.
    func section(_ title: String) {
        record.withLock { record in
            record.sectionStart = record.entries.count
            Console.line("\n  -- " + title + " --")
        }
    }

    /// The lines recorded since the current section began.
    var entries: [Entry] {
        record.withLock { Array($0.entries[$0.sectionStart...]) }
    }

    private static func padded(_ thread: String) -> String {
        let label = "[" + thread + "]"
        let padding = max(1, threadColumn + 2 - label.count)
        return label + String(repeating: " ", count: padding)
    }

    // MARK: Checks

    /// The failed checks so far, in order.
    var failures: [String] {
        record.withLock { $0.failures }
    }

    /// How many checks ran.
    var checkCount: Int {
        record.withLock { $0.checks }
    }

    /// Records a check: prints `✓ what` or `✗ FAILED: what — detail`.
    /// Returns `ok`, so that a demo can stop early after a failure it
    /// cannot continue past.
    @discardableResult
    func check(_ ok: Bool, _ what: String, detail: @autoclosure () -> String = "") -> Bool {
        let explanation = ok ? "" : detail()
        record.withLock { record in
            record.checks += 1
            if ok {
                Console.line("  ✓ " + what)
            } else {
                let message = explanation.isEmpty ? what : what + " — " + explanation
                record.failures.append(message)
                Console.line("  ✗ FAILED: " + message)
            }
        }
        return ok
    }

    /// Checks that the state changes observed on the operation named `name`
    /// since the section began are exactly `expected` (each written without
    /// the name, e.g. `isExecuting NO→YES`).
    @discardableResult
    func checkStateChanges(of name: String, equal expected: [String], _ what: String) -> Bool {
        let prefix = name + " "
        let actual = entries
            .filter { $0.isStateChange && $0.text.hasPrefix(prefix) }
            .map { String($0.text.dropFirst(prefix.count)) }
        return check(
            actual == expected,
            what,
            detail: "expected [\(expected.joined(separator: ", "))], observed [\(actual.joined(separator: ", "))]"
        )
    }

    /// The position of the first line (since the section began) whose text
    /// is exactly `text`.
    func position(of text: String) -> Int? {
        entries.first { $0.text == text }?.index
    }

    /// Waits, at most `seconds`, until every text in `texts` has been
    /// recorded (by another thread still finishing its work). Returns
    /// whether they all were.
    func waitForLines(_ texts: [String], seconds: Double = 10) -> Bool {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while !texts.allSatisfy({ position(of: $0) != nil }) {
            guard ContinuousClock.now < deadline else { return false }
            _ = DispatchSemaphore(value: 0).wait(timeout: .now() + .milliseconds(1))
        }
        return true
    }

    /// How many lines since the section began have exactly this text.
    func count(of text: String) -> Int {
        entries.filter { $0.text == text }.count
    }

    /// The thread that recorded the first line with exactly this text.
    func thread(of text: String) -> String? {
        entries.first { $0.text == text }?.thread
    }

    /// Checks that each of `texts` was recorded, in this order.
    @discardableResult
    func checkOrder(_ texts: [String], _ what: String) -> Bool {
        let positions = texts.map { position(of: $0) }
        if let missing = zip(texts, positions).first(where: { $0.1 == nil }) {
            return check(false, what, detail: "\"\(missing.0)\" was never recorded")
        }
        let found = positions.compactMap { $0 }
        let inOrder = zip(found, found.dropFirst()).allSatisfy { $0 < $1 }
        return check(
            inOrder,
            what,
            detail: "recorded order: " + zip(texts, found).sorted { $0.1 < $1.1 }.map { "\"\($0.0)\"" }.joined(separator: " < ")
        )
    }

    /// Checks that every line in `texts` was recorded on a thread whose name
    /// starts with `prefix`.
    @discardableResult
    func checkThreads(of texts: [String], startWith prefix: String, _ what: String) -> Bool {
        let threads = texts.map { thread(of: $0) }
        let wrong = zip(texts, threads).filter { !($0.1?.hasPrefix(prefix) ?? false) }
        return check(
            wrong.isEmpty,
            what,
            detail: wrong.map { "\"\($0.0)\" ran on \($0.1 ?? "no thread: never recorded")" }.joined(separator: "; ")
        )
    }
}

/// Formats a Boolean the way the documents print them.
func yesNo(_ value: Bool?) -> String {
    guard let value else { return "nil" }
    return value ? "YES" : "NO"
}
