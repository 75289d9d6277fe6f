import Operations
import Synchronization

/// Listing 2-1's `MyCustomClass`: `taskWithData:` wraps a method of the
/// object in an invocation operation. Objective-C's target and selector
/// become the object and an unapplied method reference
/// (`MyCustomClass.myTaskMethod`).
final class MyCustomClass: Sendable {
    // Sendable: `log` is Sendable and immutable.
    private let log: DemoLog

    init(log: DemoLog) {
        self.log = log
    }

    /// Listing 2-1's `taskWithData:`.
    func taskWithData(_ data: String) -> InvocationOperation {
        InvocationOperation(target: self, method: MyCustomClass.myTaskMethod, argument: data)
    }

    /// Listing 2-1's `myTaskMethod:`: the actual work (here, counting bytes).
    func myTaskMethod(_ data: String) -> Int {
        log.note("myTaskMethod(\"\(data)\")")
        return data.utf8.count
    }

    /// Two methods of the same shape, for a method chosen at run time.
    func shout(_ data: String) -> String {
        log.note("shout(\"\(data)\")")
        return data.uppercased()
    }

    func whisper(_ data: String) -> String {
        log.note("whisper(\"\(data)\")")
        return data.lowercased()
    }

    /// A method without arguments or result.
    func tidyUp() {
        log.note("tidyUp()")
    }
}

/// `invocation`: the chapter's Listing 2-1 with `InvocationOperation`.
enum InvocationDemo {
    static let demo = DemoCase(
        name: "invocation",
        summary: "InvocationOperation calls an existing method and keeps its result",
        sources: [DemoCitation(.appleOperationQueues, "Creating an NSInvocationOperation Object (Listing 2-1)")],
        shows: "An InvocationOperation runs an object's method on a worker and keeps what it returns.",
        lookFor: "\"result = 17\" on [caller]; a cancelled invocation's result is reported as a misuse.",
        run: run
    )

    static func run(_ log: DemoLog) {
        let object = MyCustomClass(log: log)
        let queue = OperationQueue()
        queue.name = "listing 2-1"

        log.section("1. taskWithData: wraps myTaskMethod: in an operation")
        let task = object.taskWithData("hello, operations")
        let recorder = StateRecorder(log: log)
        recorder.watch(task, as: "task", printInitialValues: false)
        queue.addOperation(task)
        let finished = task.waitUntilFinished(timeout: .seconds(5))
        recorder.stop()
        let count = task.result as? Int
        log.note("result = \(count.map(String.init) ?? "nil")")
        log.check(finished, "the invocation finished within 5 s")
        log.checkStateChanges(of: "task", equal: ["isExecuting NO→YES", "isExecuting YES→NO", "isFinished NO→YES"],
                              "task: executing, then finished")
        log.checkOrder(["task isExecuting NO→YES", "myTaskMethod(\"hello, operations\")", "task isFinished NO→YES"],
                       "the method ran while the operation was executing")
        log.check(count == 17, "result holds what myTaskMethod returned (17 bytes)", detail: "result = \(String(describing: task.result))")
        log.checkThreads(of: ["myTaskMethod(\"hello, operations\")"], startWith: "ops.worker.", "the method ran on a library worker thread")

        log.section("2. the method chosen at run time (a selector chosen dynamically)")
        let methods: [String: @Sendable (MyCustomClass) -> (String) -> String] = [
            "shout": MyCustomClass.shout,
            "whisper": MyCustomClass.whisper,
        ]
        var chosen: [(name: String, operation: InvocationOperation)] = []
        for name in ["shout", "whisper"] {
            guard let method = methods[name] else { continue }
            let operation = InvocationOperation(target: object, method: method, argument: "Mixed Case")
            operation.name = name
            chosen.append((name, operation))
        }
        queue.addOperations(chosen.map(\.operation), waitUntilFinished: false)
        let drained = queue.waitUntilAllOperationsAreFinished(timeout: .seconds(5))
        for (name, operation) in chosen {
            log.note("\(name) → \(String(describing: operation.result ?? "nil"))")
        }
        log.check(drained, "both invocations finished within 5 s")
        log.check(chosen.map { $0.operation.result as? String } == ["MIXED CASE", "mixed case"],
                  "each operation called the method looked up by name",
                  detail: "results: \(chosen.map { String(describing: $0.operation.result) })")

        log.section("3. a method without arguments returning Void")
        let tidy = InvocationOperation(target: object, method: MyCustomClass.tidyUp)
        tidy.name = "tidy"
        queue.addOperation(tidy)
        let tidied = tidy.waitUntilFinished(timeout: .seconds(5))
        log.check(tidied && log.count(of: "tidyUp()") == 1, "tidyUp ran once")
        log.check(tidy.result == nil, "its result is nil", detail: "result = \(String(describing: tidy.result))")

        log.section("4. a cancelled invocation has no result")
        let cancelled = object.taskWithData("never")
        cancelled.name = "cancelled task"
        cancelled.cancel()
        queue.addOperation(cancelled)
        let retired = cancelled.waitUntilFinished(timeout: .seconds(5))
        let misuses = Mutex<[OperationMisuse]>([])
        let result = OperationMisuse.withHandler({ misuse in misuses.withLock { $0.append(misuse) } }) {
            cancelled.result
        }
        let reported = misuses.withLock { $0 }
        for misuse in reported { log.note("reported: \(misuse.message)") }
        log.check(retired, "the cancelled invocation finished within 5 s without running")
        log.check(log.count(of: "myTaskMethod(\"never\")") == 0, "myTaskMethod was never called")
        log.check(reported.map(\.code) == [.cancelledInvocationResult] && result == nil,
                  "reading its result is reported as a misuse (Foundation raises an exception), and gives nil",
                  detail: "reported \(reported.map(\.code)), result \(String(describing: result))")
    }
}
