/// What a report (a misuse, a hang report) is about: its subject as text,
/// `Type "name" (0x…)` or `OperationQueue "name"`, and the structured fields
/// of `OperationReport` behind it.
///
/// Built with no library lock held: it reads names, which may be user code
/// (`name` is open) and take the operation's or the queue's lock.
struct ReportSubject: Sendable {
    var text: String?
    var kind: OperationReport.SubjectKind?
    var operationName: String?
    var operationTypeName: String?
    var queueName: String?

    /// No subject (the worker-ceiling report).
    static let none = ReportSubject()

    /// The operation, with the queue that owns it (if any) as the queue
    /// concerned.
    static func operation(_ operation: Operation) -> ReportSubject {
        Self.operation(operation, in: operation.owningQueueForAnalysis())
    }

    /// The operation, with `queue` as the queue concerned (the queue it was
    /// being added to, for the add misuses).
    static func operation(_ operation: Operation, in queue: OperationQueue?) -> ReportSubject {
        ReportSubject(
            text: operation.misuseSubject,
            kind: .operation,
            operationName: operation.name,
            operationTypeName: operation.typeName,
            queueName: queue?.ownName
        )
    }

    /// The queue.
    static func queue(_ queue: OperationQueue) -> ReportSubject {
        ReportSubject(text: queue.misuseSubject, kind: .queue, queueName: queue.ownName)
    }
}

extension Operation {
    /// The operation's type, as in its descriptions: `BlockOperation`,
    /// `ResultOperation<Int, Never>`.
    var typeName: String { String(describing: Swift.type(of: self)) }
}

extension OperationQueue {
    /// The default ``name``: `NSOperationQueue 0x…`, with the queue's address.
    final var defaultName: String {
        "NSOperationQueue 0x" + String(UInt(bitPattern: ObjectIdentifier(self)), radix: 16)
    }

    /// The queue's name if it has one of its own (see ``isNamed``), else nil.
    /// Reads `name` once (an override is user code).
    final var ownName: String? {
        guard let name, name != defaultName else { return nil }
        return name
    }
}
