#if Logging
import Logging
import Operations
import OperationsLogging
import Testing

/// A `LogHandler` that keeps every entry.
struct CapturingLogHandler: LogHandler {
    let entries: Collected<LogEvent>
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace
    var metadataProvider: Logger.MetadataProvider?

    func log(event: LogEvent) { entries.append(event) }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
}

extension IntegrationTests {
    @Suite("OperationsLogging")
    struct LoggingTests {
        let entries = Collected<LogEvent>()
        var logger: Logger { Logger(label: "operations.test") { [entries] _ in CapturingLogHandler(entries: entries) } }

        /// Entries whose message mentions `name` (other tests of the process report too).
        func logged(mentioning name: String) -> [LogEvent] {
            entries.all.filter { "\($0.message)".contains(name) }
        }

        @Test("A misuse is logged as an error with its code and operation, and the policy still applies")
        func misuseOfOperation() throws {
            let token = OperationLogging.install(logger)
            defer { token.cancel() }
            let name = uniqueName("resize")
            let dependency = BlockOperation {}
            let operation = BlockOperation {}
            operation.name = name
            operation.addDependency(dependency)

            let handled = Collected<OperationMisuse>()
            OperationMisuse.withHandler({ handled.append($0) }) { operation.start() }

            // The policy is unchanged: the handler got the misuse and the call was refused.
            #expect(handled.all.map(\.code) == [.startNotReady])
            #expect(!operation.isExecuting && !operation.isFinished)

            let entry = try #require(logged(mentioning: name).first)
            #expect(logged(mentioning: name).count == 1)
            #expect(entry.level == .error)
            #expect(entry.source == "Operations")
            let metadata = try #require(entry.metadata)
            #expect(metadata["report.kind"] == "misuse")
            #expect(metadata["misuse.code"] == "startNotReady")
            let subject = try #require(metadata["operation"]).description
            #expect(subject.contains("BlockOperation \"\(name)\" (0x"))
            #expect(subject == handled.all.first?.subject)
            #expect(metadata["operation.name"] == .string(name))
            #expect(metadata["operation.type"] == "BlockOperation")
            #expect(metadata["queue"] == nil)
            #expect(metadata["queue.name"] == nil, "in no queue")
            #expect(metadata["report.cycle"] == nil)
            #expect(metadata["report.cycle.members"] == nil)
            #expect("\(entry.message)" == handled.all.first?.message)
        }

        @Test("A misuse of a queue carries the queue as its subject")
        func misuseOfQueue() throws {
            let token = OperationLogging.install(logger)
            defer { token.cancel() }
            let queue = OperationQueue()
            queue.name = uniqueName("thumbnails")

            OperationMisuse.withHandler({ _ in }) { queue.maxConcurrentOperationCount = -5 }

            let entry = try #require(logged(mentioning: queue.name!).first)
            #expect(entry.level == .error)
            #expect(entry.metadata?["misuse.code"] == "invalidMaxConcurrentOperationCount")
            #expect(entry.metadata?["queue"] == "OperationQueue \"\(queue.name!)\"")
            #expect(entry.metadata?["queue.name"] == .string(queue.name!))
            #expect(entry.metadata?["operation"] == nil)
            #expect(entry.metadata?["operation.name"] == nil && entry.metadata?["operation.type"] == nil)
        }

        @Test("The subject's key comes from the report's subject kind, whatever the names; unnamed queues get no queue.name")
        func subjectKindNotGuessed() throws {
            let token = OperationLogging.install(logger)
            defer { token.cancel() }
            // An operation name ending with ")" and a queue name ending
            // with ")": the old guess (by the subject's last character)
            // would have called the queue an operation.
            let queue = OperationQueue()
            queue.name = uniqueName("(parenthesized)")
            OperationMisuse.withHandler({ _ in }) { queue.maxConcurrentOperationCount = -3 }
            let entry = try #require(logged(mentioning: queue.name!).first)
            #expect(entry.metadata?["queue"] != nil)
            #expect(entry.metadata?["operation"] == nil)

            // An operation owned by an unnamed queue: no queue.name (its
            // default name holds an address).
            let unnamed = OperationQueue()
            unnamed.isSuspended = true
            let operation = BlockOperation {}
            operation.name = uniqueName("owned")
            unnamed.addOperation(operation)
            OperationMisuse.withHandler({ _ in }) { operation.threadPriority = 7 }
            let owned = try #require(logged(mentioning: operation.name!).first)
            #expect(owned.metadata?["operation"] != nil)
            #expect(owned.metadata?["queue.name"] == nil)

            // Named, the queue's name comes with the operation's report.
            unnamed.name = uniqueName("now-named")
            OperationMisuse.withHandler({ _ in }) { operation.threadPriority = 8 }
            let again = logged(mentioning: operation.name!)
            #expect(again.count == 2)
            #expect(again.last?.metadata?["queue.name"] == .string(unnamed.name!))
            unnamed.isSuspended = false
            #expect(unnamed.waitUntilAllOperationsAreFinished(timeout: patience))
        }

        @Test("A dependency cycle reported as a misuse is marked as a cycle")
        func dependencyCycle() throws {
            let token = OperationLogging.install(logger)
            defer { token.cancel() }
            let first = BlockOperation {}
            first.name = uniqueName("first")
            let second = BlockOperation {}
            second.name = uniqueName("second")
            first.addDependency(second)

            OperationMisuse.withDependencyCycleReporting {
                OperationMisuse.withHandler({ _ in }) { second.addDependency(first) }
            }

            #expect(second.dependencies.isEmpty, "the edge closing the cycle was refused")
            let entry = try #require(logged(mentioning: first.name!).first)
            #expect(entry.level == .error)
            #expect(entry.metadata?["misuse.code"] == "dependencyCycle")
            #expect(entry.metadata?["report.cycle"] == "true")
            #expect("\(entry.message)".contains(second.name!))
            // second → first → second, each depending on the next.
            guard case .array(let members)? = entry.metadata?["report.cycle.members"] else {
                Issue.record("no report.cycle.members")
                return
            }
            let names = members.map(\.description)
            #expect(names.count == 3)
            #expect(names.first?.contains(second.name!) == true)
            #expect(names.dropFirst().first?.contains(first.name!) == true)
            #expect(names.last == names.first)
        }

        @Test("Custom levels, and nothing is logged after the token is cancelled")
        func levelsAndCancel() throws {
            let token = OperationLogging.install(logger, misuseLevel: .critical)
            let early = BlockOperation {}
            early.name = uniqueName("early")
            early.addDependency(BlockOperation {})
            OperationMisuse.withHandler({ _ in }) { early.start() }
            #expect(logged(mentioning: early.name!).map(\.level) == [.critical])

            token.cancel()
            token.cancel()
            let late = BlockOperation {}
            late.name = uniqueName("late")
            late.addDependency(BlockOperation {})
            OperationMisuse.withHandler({ _ in }) { late.start() }
            #expect(logged(mentioning: late.name!).isEmpty)
        }

        @Test("A wait that lasts too long is logged as a warning naming the dependency cycle")
        func hangReport() throws {
            // OPERATIONS_WAIT_WARNING_SECONDS, or a threshold of our own.
            let saved = OperationReporting.waitWarningThreshold
            if saved == nil { OperationReporting.waitWarningThreshold = .milliseconds(200) }
            defer { OperationReporting.waitWarningThreshold = saved }
            let queue = OperationQueue()
            queue.name = uniqueName("stuck")
            let first = BlockOperation {}
            first.name = uniqueName("ping")
            let second = BlockOperation {}
            second.name = uniqueName("pong")
            first.addDependency(second)
            second.addDependency(first)   // a cycle, kept (cycle reporting is off)

            // The hang report arrives on the waiting thread; the handler breaks
            // the cycle, and the wait then ends.
            let breaker = Logger(label: "operations.test") { [entries] _ in
                BreakingLogHandler(entries: entries, name: first.name!, operation: first)
            }
            let token = OperationLogging.install(breaker)
            defer { token.cancel() }
            queue.addOperations([first, second], waitUntilFinished: false)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))

            let entry = try #require(logged(mentioning: first.name!).first { $0.metadata?["report.kind"] == "waitTooLong" })
            #expect(entry.level == .warning)
            #expect(entry.metadata?["report.cycle"] == "true")
            #expect(entry.metadata?["misuse.code"] == nil)
            #expect(entry.metadata?["queue"] == .string("OperationQueue \"\(queue.name!)\""), "the wait's subject")
            #expect(entry.metadata?["queue.name"] == .string(queue.name!))
            if case .array(let members)? = entry.metadata?["report.cycle.members"] {
                #expect(members.count == 3)
            } else {
                Issue.record("no report.cycle.members")
            }
            #expect("\(entry.message)".contains("cycle: "))
            #expect(!"\(entry.message)".hasSuffix("\n"))
            #expect(first.isCancelled && second.isFinished)
        }
    }
}

/// Captures entries, and cancels `operation` when an entry mentions `name`.
struct BreakingLogHandler: LogHandler {
    let entries: Collected<LogEvent>
    let name: String
    let operation: Operation
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace
    var metadataProvider: Logger.MetadataProvider?

    func log(event: LogEvent) {
        entries.append(event)
        if "\(event.message)".contains(name) { operation.cancel() }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
}
#endif
