#if Tracing
import Dispatch
import InMemoryTracing
import Operations
@testable import OperationsTracing
import Testing
import Tracing

/// The tracer bootstrapped into `InstrumentationSystem`, once per process.
enum TracingBootstrap {
    static let tracer: InMemoryTracer = {
        let tracer = InMemoryTracer()
        InstrumentationSystem.bootstrap(tracer)
        return tracer
    }()
}

/// A value carried in `ServiceContext`, like a request ID.
enum RequestIDKey: ServiceContextKey {
    typealias Value = String
}

extension IntegrationTests {
    @Suite("OperationsTracing")
    struct TracingTests {
        func spans(_ tracer: InMemoryTracer, named name: String) -> [FinishedInMemorySpan] {
            tracer.finishedSpans.filter { $0.operationName == name }
        }

        @Test("An operation's span is a child of the adder's span, and the body's spans are its children")
        func parentAndChild() throws {
            let tracer = InMemoryTracer()
            let token = OperationTracing.install()
            defer { token.cancel() }
            let queue = OperationQueue()
            queue.name = uniqueName("render")
            let name = uniqueName("render-page")
            let inner = uniqueName("inner")
            let bodyContext = Collected<InMemorySpanContext?>()
            let operation = BlockOperation {
                bodyContext.append(ServiceContext.current?.inMemorySpanContext)
                withSpan(inner) { _ in }
            }
            operation.name = name
            withTracer(tracer) {
                tracer.withSpan("request") { _ in queue.addOperation(operation) }
            }
            #expect(retired([operation]))

            let request = try #require(spans(tracer, named: "request").first)
            let spansOfOperation = spans(tracer, named: name)
            #expect(spansOfOperation.count == 1, "ended exactly once")
            let span = try #require(spansOfOperation.first)
            #expect(span.parentSpanID == request.spanID)
            #expect(span.traceID == request.traceID)
            #expect(bodyContext.all.first??.spanID == span.spanID, "the span's context is current in the body")
            let child = try #require(spans(tracer, named: inner).first)
            #expect(child.parentSpanID == span.spanID)
            #expect(child.traceID == request.traceID)

            #expect(span.attributes.get(OperationTracing.classAttribute) == .string("BlockOperation"))
            #expect(span.attributes.get(OperationTracing.queueAttribute) == .string(queue.name!))
            #expect(span.attributes.get(OperationTracing.cancelledAttribute) == .bool(false))
            #expect(span.events.isEmpty)
            #expect(span.startInstant.nanosecondsSinceEpoch <= span.endInstant.nanosecondsSinceEpoch)
            #expect(tracer.activeSpans.isEmpty)
            #expect(token.spans.count == 0, "bookkeeping released at finish")
        }

        @Test("An async body runs in its span: child spans across suspension points")
        func asyncBody() throws {
            let tracer = InMemoryTracer()
            let token = OperationTracing.install()
            defer { token.cancel() }
            let queue = OperationQueue()
            let name = uniqueName("fetch")
            let inner = uniqueName("decode")
            let operation = ResultOperation<String?, Never> { () async -> String? in
                await withSpan(inner) { _ in await Task.yield() }
                return ServiceContext.current?.inMemorySpanContext?.spanID
            }
            operation.name = name
            withTracer(tracer) {
                tracer.withSpan("request") { _ in queue.addOperation(operation) }
            }
            #expect(retired([operation]))

            let request = try #require(spans(tracer, named: "request").first)
            #expect(spans(tracer, named: name).count == 1)
            let span = try #require(spans(tracer, named: name).first)
            #expect(span.parentSpanID == request.spanID)
            guard case .success(let seenID)? = operation.result else {
                Issue.record("the operation has no result")
                return
            }
            #expect(seenID == span.spanID, "the span's context is current across suspension points")
            let child = try #require(spans(tracer, named: inner).first)
            #expect(child.parentSpanID == span.spanID)
            #expect(span.attributes.get(OperationTracing.classAttribute) == .string("ResultOperation<Optional<String>, Never>"))
            #expect(span.attributes.get(OperationTracing.queueAttribute) == nil, "an unnamed queue's default name holds an address")
        }

        @Test("The span of an asynchronous operation ends when it calls finish(), not when execute() returns")
        func asynchronousOperation() throws {
            let tracer = InMemoryTracer()
            let token = OperationTracing.install()
            defer { token.cancel() }
            let queue = OperationQueue()
            let name = uniqueName("download")
            let gate = Gate()
            let executed = Arrivals()
            let download = AsyncOperation { operation in
                executed.arrive()
                DispatchQueue.global().async {
                    _ = gate.wait()
                    operation.finish()
                }
            }
            download.name = name
            withTracer(tracer) { queue.addOperation(download) }
            #expect(executed.wait(for: 1))
            #expect(tracer.activeSpans.contains { $0.operationName == name })
            #expect(spans(tracer, named: name).isEmpty)

            gate.open()
            #expect(retired([download]))
            #expect(spans(tracer, named: name).count == 1)
            #expect(spans(tracer, named: name).first?.parentSpanID == nil, "added with no current span: a root")
            #expect(token.spans.count == 0)
        }

        @Test("Cancellation is recorded, before the add, before the start and while executing")
        func cancellation() throws {
            let tracer = InMemoryTracer()
            let token = OperationTracing.install()
            defer { token.cancel() }
            let queue = OperationQueue()
            queue.isSuspended = true
            let gate = Gate()
            let started = Arrivals()
            let early = BlockOperation {}
            early.name = uniqueName("early")
            // Cancelled before it is even added (probe 44: its span had no
            // `cancelled` event).
            let before = BlockOperation {}
            before.name = uniqueName("before-add")
            before.cancel()
            let running = BlockOperation {
                started.arrive()
                _ = gate.wait()
            }
            running.name = uniqueName("running")
            withTracer(tracer) { queue.addOperations([before, early, running], waitUntilFinished: false) }
            early.cancel()
            queue.isSuspended = false
            #expect(started.wait(for: 1))
            running.cancel()
            gate.open()
            #expect(retired([before, early, running]))

            for name in [before.name!, early.name!, running.name!] {
                let found = spans(tracer, named: name)
                #expect(found.count == 1, "\(name) ended exactly once")
                let span = try #require(found.first)
                #expect(span.attributes.get(OperationTracing.cancelledAttribute) == .bool(true))
                #expect(span.events.map(\.name) == [OperationTracing.cancelledEvent])
            }
            #expect(token.spans.count == 0)
        }

        @Test("With no tracer, the adder's ServiceContext is still carried into sync and async bodies")
        func contextWithoutTracer() throws {
            let token = OperationTracing.install()
            defer { token.cancel() }
            let queue = OperationQueue()
            let seen = Collected<String>()
            let sync = BlockOperation { seen.append("sync:" + (ServiceContext.current?[RequestIDKey.self] ?? "none")) }
            let async = ResultOperation<Void, Never> { () async in
                await Task.yield()
                seen.append("async:" + (ServiceContext.current?[RequestIDKey.self] ?? "none"))
            }
            let outside = BlockOperation { seen.append("outside:" + (ServiceContext.current?[RequestIDKey.self] ?? "none")) }
            var context = ServiceContext.topLevel
            context[RequestIDKey.self] = "req-42"
            withTracer(NoOpTracer()) {
                ServiceContext.withValue(context) {
                    queue.addOperations([sync, async], waitUntilFinished: false)
                }
                queue.addOperation(outside)
            }
            #expect(retired([sync, async, outside]))
            #expect(Set(seen.all) == ["sync:req-42", "async:req-42", "outside:none"])
            #expect(token.spans.count == 0, "no span bookkeeping without a tracer")
        }

        @Test("A given tracer and span name; an operation started by hand is traced too")
        func givenTracerAndManualStart() throws {
            let tracer = InMemoryTracer()
            let token = OperationTracing.install(tracer: tracer) { "op:" + ($0.name ?? "?") }
            defer { token.cancel() }
            let name = uniqueName("by-hand")
            let inner = uniqueName("inside")
            let operation = BlockOperation { withSpan(inner) { _ in } }
            operation.name = name
            tracer.withSpan("caller") { _ in operation.start() }

            let caller = try #require(spans(tracer, named: "caller").first)
            let span = try #require(spans(tracer, named: "op:" + name).first)
            #expect(spans(tracer, named: "op:" + name).count == 1)
            #expect(span.parentSpanID == caller.spanID)
            #expect(span.attributes.get(OperationTracing.queueAttribute) == nil)
            #expect(spans(tracer, named: inner).first?.parentSpanID == span.spanID, "the given tracer is bound in the body")
            #expect(token.spans.count == 0)
        }

        @Test("By default, the bootstrapped tracer")
        func bootstrappedTracer() throws {
            let tracer = TracingBootstrap.tracer
            let token = OperationTracing.install()
            defer { token.cancel() }
            let queue = OperationQueue()
            let name = uniqueName("bootstrapped")
            let operation = BlockOperation {}
            operation.name = name
            queue.addOperation(operation)
            #expect(retired([operation]))
            #expect(spans(tracer, named: name).count == 1)
            #expect(OperationTracing.defaultSpanName(BlockOperation {}) == "BlockOperation")
        }
    }
}
#endif
