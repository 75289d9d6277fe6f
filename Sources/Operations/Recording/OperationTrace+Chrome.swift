// Export of a recorded trace in the Chrome trace-event format, which
// Perfetto (ui.perfetto.dev) and chrome://tracing open.

extension OperationTrace {
    /// The trace in the Chrome trace-event JSON format (the "JSON Object
    /// Format": `{"traceEvents": [...]}`), which Perfetto's UI
    /// (ui.perfetto.dev) and `chrome://tracing` open.
    ///
    /// - One track per thread that started operations (named `ops.worker.N`,
    ///   `main`, …), with one complete slice (`"ph": "X"`) per operation that
    ///   started and finished during the recording. Its arguments give the
    ///   queue, class, priority, quality of service, and when it was added,
    ///   became ready and was cancelled.
    /// - Operations that never started (still pending when the recording
    ///   stopped) are instant events (`"ph": "i"`) on a track named
    ///   "not started", at the time they were added.
    /// - A flow arrow (`"ph": "s"` / `"f"`) along every dependency edge whose
    ///   two ends have slices, from the dependency to the dependent.
    /// - A counter track (`"ph": "C"`) per queue with its ready, executing and
    ///   pending operations over time.
    ///
    /// Timestamps are microseconds since the recording started.
    ///
    /// - Complexity: O(operations + dependency edges + samples).
    public func chromeTraceJSON() -> String {
        var writer = JSONArrayWriter()
        let pid = 1
        writer.append(metadata: "process_name", pid: pid, tid: 0, name: "Operations")
        for worker in workers {
            writer.append(metadata: "thread_name", pid: pid, tid: worker.id + 1, name: worker.name)
        }
        let pendingTrack = workers.count + 1
        if operations.contains(where: { $0.started == nil }) {
            writer.append(metadata: "thread_name", pid: pid, tid: pendingTrack, name: "not started")
        }
        for operation in operations {
            let arguments = chromeArguments(for: operation)
            if let started = operation.started {
                let end = operation.finished ?? duration
                let track = (operation.worker ?? -1) + 1
                writer.appendObject([
                    ("name", .string(operation.label)),
                    ("cat", .string(queueName(of: operation))),
                    ("ph", .string("X")),
                    ("ts", .microseconds(started)),
                    ("dur", .microseconds(end >= started ? end - started : 0)),
                    ("pid", .integer(pid)),
                    ("tid", .integer(track)),
                    ("args", .object(arguments)),
                ])
            } else {
                writer.appendObject([
                    ("name", .string(operation.label)),
                    ("cat", .string(queueName(of: operation))),
                    ("ph", .string("i")),
                    ("s", .string("t")),
                    ("ts", .microseconds(operation.added ?? 0)),
                    ("pid", .integer(pid)),
                    ("tid", .integer(pendingTrack)),
                    ("args", .object(arguments)),
                ])
            }
        }
        var flow = 0
        for operation in operations {
            guard let started = operation.started else { continue }
            for dependencyID in operation.dependencies {
                let dependency = operations[dependencyID]
                guard let dependencyStart = dependency.started else { continue }
                flow += 1
                // The start binds to the dependency's slice (a point inside
                // it); the end binds to the dependent's slice ("bp": "e").
                let dependencyEnd = dependency.finished ?? dependencyStart
                let inside = dependencyStart + (dependencyEnd >= dependencyStart ? (dependencyEnd - dependencyStart) / 2 : 0)
                writer.appendObject([
                    ("name", .string("dependency")),
                    ("cat", .string("dependency")),
                    ("ph", .string("s")),
                    ("id", .integer(flow)),
                    ("ts", .microseconds(inside)),
                    ("pid", .integer(pid)),
                    ("tid", .integer((dependency.worker ?? -1) + 1)),
                ])
                writer.appendObject([
                    ("name", .string("dependency")),
                    ("cat", .string("dependency")),
                    ("ph", .string("f")),
                    ("bp", .string("e")),
                    ("id", .integer(flow)),
                    ("ts", .microseconds(started)),
                    ("pid", .integer(pid)),
                    ("tid", .integer((operation.worker ?? -1) + 1)),
                ])
            }
        }
        for sample in samples {
            writer.appendObject([
                ("name", .string("queue \(queues[sample.queue].name)")),
                ("ph", .string("C")),
                ("ts", .microseconds(sample.time)),
                ("pid", .integer(pid)),
                ("args", .object([
                    ("ready", .integer(sample.ready)),
                    ("executing", .integer(sample.executing)),
                    ("pending", .integer(sample.pending)),
                ])),
            ])
        }
        return "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n" + writer.text + "\n]}\n"
    }

    /// The name of the operation's queue, or "started by hand".
    func queueName(of operation: OperationRecord) -> String {
        operation.queue.map { queues[$0].name } ?? "started by hand"
    }

    private func chromeArguments(for operation: OperationRecord) -> [(String, JSONValue)] {
        var arguments: [(String, JSONValue)] = [
            ("id", .integer(operation.id)),
            ("class", .string(operation.typeName)),
            ("queue", .string(queueName(of: operation))),
            ("queuePriority", .string(operation.priority.description)),
            ("qualityOfService", .string(operation.qualityOfService.description)),
        ]
        if let added = operation.added { arguments.append(("added_us", .microseconds(added))) }
        if let ready = operation.ready { arguments.append(("ready_us", .microseconds(ready))) }
        if let cancelled = operation.cancelled { arguments.append(("cancelled_us", .microseconds(cancelled))) }
        if !operation.dependencies.isEmpty {
            arguments.append(("dependencies", .string(operation.dependencies.map { operations[$0].label }.joined(separator: ", "))))
        }
        return arguments
    }
}

/// A JSON value, as much of JSON as the exporters need.
enum JSONValue {
    case string(String)
    case integer(Int)
    /// Nanoseconds, written as microseconds with three decimals.
    case microseconds(UInt64)
    case object([(String, JSONValue)])

    func write(into text: inout String) {
        switch self {
        case .string(let value):
            text += JSONValue.quoted(value)
        case .integer(let value):
            text += String(value)
        case .microseconds(let nanoseconds):
            let fraction = nanoseconds % 1_000
            text += String(nanoseconds / 1_000)
            text += fraction < 10 ? ".00" : fraction < 100 ? ".0" : "."
            text += String(fraction)
        case .object(let members):
            text += "{"
            for (index, (key, value)) in members.enumerated() {
                if index > 0 { text += "," }
                text += JSONValue.quoted(key)
                text += ":"
                value.write(into: &text)
            }
            text += "}"
        }
    }

    /// `value` as a JSON string literal.
    static func quoted(_ value: String) -> String {
        var result = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    result += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result + "\""
    }
}

/// Writes the elements of a JSON array, one per line.
struct JSONArrayWriter {
    private(set) var text = ""

    mutating func appendObject(_ members: [(String, JSONValue)]) {
        if !text.isEmpty { text += ",\n" }
        JSONValue.object(members).write(into: &text)
    }

    mutating func append(metadata kind: String, pid: Int, tid: Int, name: String) {
        appendObject([
            ("name", .string(kind)),
            ("ph", .string("M")),
            ("pid", .integer(pid)),
            ("tid", .integer(tid)),
            ("args", .object([("name", .string(name))])),
        ])
    }
}
