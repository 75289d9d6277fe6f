#if Logging
import Logging
import Operations

/// Sends the library's reports — misuses, waits that last too long (with
/// the dependency cycles they find), the worker pool reaching its ceiling —
/// to a swift-log `Logger`.
///
/// ```swift
/// import Logging
/// import OperationsLogging
///
/// let logging = OperationLogging.install(Logger(label: "operations"))
/// // … keep `logging` as long as reports should be logged; then:
/// logging.cancel()
/// ```
///
/// Available with the package trait `Logging`:
/// `.package(url: …, from: …, traits: ["Logging"])`.
///
/// ## Levels and metadata
/// A misuse is logged at ``defaultMisuseLevel`` (`.error`); a wait that has
/// lasted longer than ``Operations/OperationReporting/waitWarningThreshold``
/// (`OPERATIONS_WAIT_WARNING_SECONDS`), and the worker ceiling, at
/// ``defaultWarningLevel`` (`.warning`). Each entry carries the metadata of
/// ``metadata(for:)``: `report.kind`, `misuse.code`, `operation` or `queue`
/// (the subject), `operation.name`, `operation.type`, `queue.name`, and
/// `report.cycle` with `report.cycle.members` when the report names a
/// dependency cycle.
///
/// ## The misuse policy is unchanged
/// Logging observes misuses; it does not handle them. With the default
/// policy the process still traps (the entry is logged just before), and
/// with a handler installed (``Operations/OperationMisuse/handler`` or
/// ``Operations/OperationMisuse/withHandler(_:_:)``) the offending call
/// is still refused. Install a handler too if a misuse must not stop the
/// process.
public enum OperationLogging {
    /// The level of misuse reports unless ``install(_:misuseLevel:warningLevel:)``
    /// is given another: `.error`.
    public static let defaultMisuseLevel: Logger.Level = .error

    /// The level of hang (`waitTooLong`) and worker-ceiling reports unless
    /// ``install(_:misuseLevel:warningLevel:)`` is given another: `.warning`.
    public static let defaultWarningLevel: Logger.Level = .warning

    /// The `source` of every entry: `"Operations"`.
    public static let source = "Operations"

    /// A running installation. ``cancel()`` it, or let it go, to stop
    /// logging.
    public final class Token: Sendable {
        private let registration: OperationReporting.Token

        init(registration: OperationReporting.Token) {
            self.registration = registration
        }

        /// Stops logging. Calling it twice does nothing.
        public func cancel() { registration.cancel() }
    }

    /// Logs every report of the library to `logger` until the returned token
    /// is cancelled or released.
    ///
    /// Entries are logged on the thread that makes the report, never while
    /// a library lock is held. Installing twice logs each report twice.
    ///
    /// - Parameters:
    ///   - logger: Where to log. Its `logLevel` filters entries as usual.
    ///   - misuseLevel: The level of misuse reports.
    ///   - warningLevel: The level of hang and worker-ceiling reports.
    /// - Returns: The installation; keep it as long as reports should be
    ///   logged.
    public static func install(
        _ logger: Logger,
        misuseLevel: Logger.Level = defaultMisuseLevel,
        warningLevel: Logger.Level = defaultWarningLevel
    ) -> Token {
        let registration = OperationReporting.addObserver { report in
            log(report, to: logger, misuseLevel: misuseLevel, warningLevel: warningLevel)
        }
        return Token(registration: registration)
    }

    /// The level `report` is logged at.
    ///
    /// - Parameters:
    ///   - report: A report of the library.
    ///   - misuseLevel: The level of misuse reports.
    ///   - warningLevel: The level of the other reports.
    /// - Returns: `misuseLevel` for a misuse, otherwise `warningLevel`.
    public static func level(
        for report: OperationReport,
        misuseLevel: Logger.Level = defaultMisuseLevel,
        warningLevel: Logger.Level = defaultWarningLevel
    ) -> Logger.Level {
        switch report.kind {
        case .misuse: misuseLevel
        case .waitTooLong, .workerCeiling: warningLevel
        }
    }

    /// The metadata of the entry for `report`, from its structured fields:
    ///
    /// - `report.kind`: `misuse`, `waitTooLong` or `workerCeiling`;
    /// - `misuse.code`: the misuse's ``Operations/OperationMisuse/Code``
    ///   (`startNotReady`, `dependencyCycle`, …), for a misuse;
    /// - `operation` or `queue`, by ``Operations/OperationReport/subjectKind``:
    ///   the subject, as `Type "name" (0x…)` for an operation and
    ///   `OperationQueue "name"` for a queue, when the report has one;
    /// - `operation.name` and `operation.type`: the operation's
    ///   ``Operations/Operation/name`` (when it has one) and type, when the
    ///   subject is an operation;
    /// - `queue.name`: the name of the queue concerned, only when it has one
    ///   of its own (``Operations/OperationReport/queueName``): never the
    ///   default `NSOperationQueue 0x…`;
    /// - `report.cycle`: `true` when the report is about a dependency cycle
    ///   (the `dependencyCycle` misuse, or a hang report that names a
    ///   cycle), with `report.cycle.members`: the cycle's operations in order
    ///   (each depends on the next, the first repeated at the end).
    ///
    /// - Parameter report: A report of the library.
    /// - Returns: The entry's metadata.
    public static func metadata(for report: OperationReport) -> Logger.Metadata {
        var metadata: Logger.Metadata = [:]
        switch report.kind {
        case .misuse(let code):
            metadata["report.kind"] = "misuse"
            metadata["misuse.code"] = .string(code.rawValue)
        case .waitTooLong:
            metadata["report.kind"] = "waitTooLong"
        case .workerCeiling:
            metadata["report.kind"] = "workerCeiling"
        }
        if let subject = report.subject {
            switch report.subjectKind {
            case .operation?: metadata["operation"] = .string(subject)
            case .queue?: metadata["queue"] = .string(subject)
            case nil: break
            }
        }
        if let name = report.operationName { metadata["operation.name"] = .string(name) }
        if let type = report.operationTypeName { metadata["operation.type"] = .string(type) }
        if let name = report.queueName { metadata["queue.name"] = .string(name) }
        if let cycle = report.cycle {
            metadata["report.cycle"] = "true"
            metadata["report.cycle.members"] = .array(cycle.map { .string($0) })
        }
        return metadata
    }

    static func log(_ report: OperationReport, to logger: Logger, misuseLevel: Logger.Level, warningLevel: Logger.Level) {
        let level = level(for: report, misuseLevel: misuseLevel, warningLevel: warningLevel)
        // Hang reports end with a newline (they are also written to standard error).
        var message = Substring(report.message)
        while message.last == "\n" { message = message.dropLast() }
        logger.log(
            level: level,
            "\(message)",
            metadata: metadata(for: report),
            source: source
        )
    }
}
#endif
