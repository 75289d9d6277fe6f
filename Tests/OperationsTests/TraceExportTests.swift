// The recorder and its exports: Chrome trace-event JSON (Perfetto), an SVG
// timeline, and GraphViz DOT of a dependency graph. The tests check content:
// every operation once, edges present, timestamps ordered.

import class Foundation.JSONSerialization
import class Foundation.NSDictionary
import class Foundation.NSArray
import class Foundation.NSNumber
import struct Foundation.Data
#if canImport(FoundationXML)
import class FoundationXML.XMLDocument
#else
import class Foundation.XMLDocument
#endif
import Testing
@testable import Operations

@Suite("Tracing and graph export", .serialized)
struct TraceExportTests {
    /// Runs a diamond (root → left, right → sink) plus a cancelled operation
    /// on a width-2 queue while recording. Names carry `prefix`, so that
    /// operations of tests running in parallel can be told apart.
    private func recordDiamond(prefix: String) -> OperationTrace {
        let queue = makeQueue("\(prefix)-queue", width: 2)
        func make(_ name: String) -> BlockOperation {
            let operation = BlockOperation {}
            operation.name = "\(prefix)-\(name)"
            return operation
        }
        let root = make("root"), left = make("left"), right = make("right"), sink = make("sink"), dropped = make("dropped")
        left.addDependency(root)
        right.addDependency(root)
        sink.addDependency(left)
        sink.addDependency(right)
        #expect(OperationTracing.start(), "another recording is in progress")
        dropped.cancel()
        queue.addOperations([sink, right, left, root, dropped], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        return OperationTracing.stop()
    }

    private func records(_ trace: OperationTrace, prefix: String) -> [String: OperationTrace.OperationRecord] {
        var result: [String: OperationTrace.OperationRecord] = [:]
        for record in trace.operations where record.name?.hasPrefix(prefix + "-") == true {
            #expect(result[record.name!] == nil, "\(record.name!) recorded twice")
            result[record.name!] = record
        }
        return result
    }

    @Test("the recorder sees every operation once, with ordered times and its dependencies")
    func recorderContent() throws {
        let trace = recordDiamond(prefix: "rec")
        let byName = records(trace, prefix: "rec")
        #expect(Set(byName.keys) == ["rec-root", "rec-left", "rec-right", "rec-sink", "rec-dropped"])
        for (name, record) in byName {
            let added = try #require(record.added, "\(name) has no add time")
            let started = try #require(record.started, "\(name) never started")
            let finished = try #require(record.finished, "\(name) never finished")
            #expect(added <= started && started <= finished, "\(name): \(added) \(started) \(finished)")
            #expect(record.worker != nil)
            #expect(record.queue.map { trace.queues[$0].name } == "rec-queue")
        }
        let sink = try #require(byName["rec-sink"])
        let dependencyNames = Set(sink.dependencies.map { trace.operations[$0].name ?? "" })
        #expect(dependencyNames == ["rec-left", "rec-right"])
        #expect(try #require(sink.started) >= max(try #require(byName["rec-left"]?.finished), try #require(byName["rec-right"]?.finished)))
        #expect(byName["rec-dropped"]?.cancelled != nil)
        #expect(!trace.samples.isEmpty, "no queue counters were recorded")
    }

    @Test("operations that reuse a freed operation's memory keep their own names and classes")
    func reusedAddresses() throws {
        let queue = makeQueue("reuse-queue", width: 1)
        #expect(OperationTracing.start(), "another recording is in progress")
        // Each operation is released before the next is made, so the
        // allocator hands the same address out again and again.
        for index in 0..<200 {
            let operation: Operation = index.isMultiple(of: 2) ? BlockOperation {} : ResultOperation<Int, Never> { index }
            operation.name = "reuse-\(index)"
            queue.addOperation(operation)
            operation.waitUntilFinished()
        }
        let trace = OperationTracing.stop()
        let byName = records(trace, prefix: "reuse")
        #expect(byName.count == 200)
        for index in 0..<200 {
            let record = try #require(byName["reuse-\(index)"], "reuse-\(index) missing")
            #expect(record.typeName.hasPrefix(index.isMultiple(of: 2) ? "BlockOperation" : "ResultOperation"), "reuse-\(index) is a \(record.typeName)")
            #expect(record.finished != nil)
        }
        // In ordinary builds the allocator reuses most addresses (this test
        // failed before descriptions were taken in order). AddressSanitizer
        // quarantines freed memory, so there every address is new and the
        // names are right trivially.
    }

    @Test("queues that reuse a freed queue's memory are recorded as queues of their own, with their own names (regression: probe 22)")
    func reusedQueueAddresses() throws {
        #expect(OperationTracing.start(), "another recording is in progress")
        // Each queue is released before the next is made, so the allocator
        // hands the same address out again.
        for index in 0..<50 {
            let queue = makeQueue("qreuse-\(index)", width: 1)
            let operation = BlockOperation {}
            operation.name = "qreuse-\(index)"
            queue.addOperation(operation)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        }
        let trace = OperationTracing.stop()
        let byName = records(trace, prefix: "qreuse")
        #expect(byName.count == 50)
        for index in 0..<50 {
            let record = try #require(byName["qreuse-\(index)"], "qreuse-\(index) missing")
            #expect(record.queue.map { trace.queues[$0].name } == "qreuse-\(index)")
        }
        #expect(Set(byName.values.compactMap(\.queue)).count == 50, "queues merged: \(trace.queues.map(\.name))")
    }

    @Test("an operation the recording never saw introduced takes no other operation's description (regression: CI)")
    func undescribedOperationAtAReusedAddress() {
        // Three operations at one address: `one` (described), an operation
        // added before the recording began (started and finished during it,
        // never described), then `three` (described). The recorder used to
        // hand descriptions out in order, so the undescribed one took
        // `three`'s, and `three` took it again: two records named `three`.
        let address: UInt = 0x1000
        func event(_ kind: TraceRecorder.RawEvent.Kind, _ time: UInt64) -> TraceRecorder.RawEvent {
            TraceRecorder.RawEvent(time: time, kind: kind, operation: address, queue: 0, thread: 1)
        }
        func info(_ name: String, _ time: UInt64) -> TraceRecorder.OperationInfo {
            TraceRecorder.OperationInfo(name: name, type: BlockOperation.self, time: time, priority: .normal, qualityOfService: .default, dependencies: [])
        }
        let raw = [
            event(.added, 110), event(.ready, 110), event(.started, 111), event(.finished, 112),
            event(.started, 120), event(.finished, 121),
            event(.added, 130), event(.ready, 130), event(.started, 131), event(.finished, 132),
        ]
        let trace = OperationTrace(
            raw: raw.reversed(),
            infos: [address: [info("one", 110), info("three", 130)]],
            queueNames: [:],
            threadNames: [:],
            startTime: 100,
            endTime: 200
        )
        #expect(trace.operations.map(\.name) == ["one", nil, "three"])
        #expect(trace.operations.map(\.started) == [11, 20, 31])
        #expect(trace.operations[2].ready == 30, "an operation's ready, recorded at its add's time, belongs to it")
    }

    @Test("Chrome trace-event JSON: one slice per operation, flows along every edge, worker tracks, counters")
    func chromeJSON() throws {
        let trace = recordDiamond(prefix: "json")
        let json = trace.chromeTraceJSON()
        let object = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? NSDictionary
        let events = try #require(object?["traceEvents"] as? NSArray).compactMap { $0 as? NSDictionary }
        func string(_ event: NSDictionary, _ key: String) -> String? { event[key] as? String }
        func number(_ event: NSDictionary, _ key: String) -> Double? { (event[key] as? NSNumber)?.doubleValue }
        for event in events {
            let phase = try #require(string(event, "ph"))
            #expect(["X", "i", "s", "f", "C", "M"].contains(phase))
            #expect(number(event, "pid") != nil)
            if phase != "M" { #expect(number(event, "ts") != nil, "an event without ts: \(event)") }
            if phase != "C" { #expect(number(event, "tid") != nil, "an event without tid: \(event)") }
        }
        let slices = events.filter { string($0, "ph") == "X" && (string($0, "name") ?? "").hasPrefix("json-") }
        #expect(slices.compactMap { string($0, "name") }.sorted() == ["json-dropped", "json-left", "json-right", "json-root", "json-sink"])
        for slice in slices { #expect((number(slice, "dur") ?? -1) >= 0) }
        let sliceByName = Dictionary(uniqueKeysWithValues: slices.map { (string($0, "name")!, $0) })
        let sinkStart = try #require(number(sliceByName["json-sink"]!, "ts"))
        for name in ["json-left", "json-right"] {
            let slice = sliceByName[name]!
            #expect(try #require(number(slice, "ts")) + (number(slice, "dur") ?? 0) <= sinkStart + 0.001)
        }
        // Flow events come in s/f pairs with the same id; the diamond has four edges.
        let ourIDs = Set(trace.operations.filter { $0.name?.hasPrefix("json-") == true }.map(\.id))
        let ourEdges = trace.operations.filter { ourIDs.contains($0.id) }.reduce(0) { $0 + $1.dependencies.count }
        #expect(ourEdges == 4)
        let starts = events.filter { string($0, "ph") == "s" }.compactMap { number($0, "id") }
        let finishes = events.filter { string($0, "ph") == "f" }.compactMap { number($0, "id") }
        #expect(Set(starts) == Set(finishes) && starts.count == finishes.count && starts.count >= 4)
        let threadNames = events.filter { string($0, "ph") == "M" && string($0, "name") == "thread_name" }
            .compactMap { ($0["args"] as? NSDictionary)?["name"] as? String }
        let notStarted = trace.operations.contains { $0.started == nil } ? ["not started"] : []
        #expect(threadNames.sorted() == (trace.workers.map(\.name) + notStarted).sorted())
        #expect(events.contains { string($0, "ph") == "C" && string($0, "name") == "queue json-queue" })
    }

    @Test("SVG timeline: well-formed, one bar per started operation, one arrow per edge")
    func svgTimeline() throws {
        let trace = recordDiamond(prefix: "svg")
        let svg = trace.svgTimeline()
        _ = try XMLDocument(xmlString: svg, options: [])
        let bars = svg.components(separatedBy: "<g class=\"operation\"").count - 1
        let edges = svg.components(separatedBy: "<line class=\"edge\"").count - 1
        #expect(bars == trace.operations.filter { $0.started != nil }.count)
        #expect(edges == trace.operations.filter { $0.started != nil }.reduce(0) { total, record in
            total + record.dependencies.filter { trace.operations[$0].started != nil }.count
        })
        for name in ["svg-root", "svg-left", "svg-right", "svg-sink"] { #expect(svg.contains(name)) }
        for worker in trace.workers { #expect(svg.contains(">\(worker.name)<")) }
    }

    @Test("SVG timeline: names with control characters still make well-formed XML (regression: probe 22)")
    func svgControlCharacters() throws {
        #expect(OperationTracing.start(), "another recording is in progress")
        let operation = BlockOperation {}
        operation.name = "step\u{1}one\u{1B}[0m\ttab & <more>"
        operation.start()
        let trace = OperationTracing.stop()
        let svg = trace.svgTimeline()
        _ = try XMLDocument(xmlString: svg, options: [])
        #expect(!svg.unicodeScalars.contains { $0.value < 0x20 && $0.value != 0x9 && $0.value != 0xA && $0.value != 0xD })
        #expect(svg.contains("step\u{FFFD}one"))
    }

    @Test("stop() with nothing recording gives an empty trace that lasted no time (probe 44)")
    func stopWithoutRecording() {
        #expect(!OperationTracing.isRecording)
        let never = OperationTracing.stop()
        #expect(never.operations.isEmpty)
        #expect(never.duration == 0, "duration \(never.duration) ns")
        #expect(OperationTracing.start())
        let recorded = OperationTracing.stop()
        let again = OperationTracing.stop()
        #expect(again.duration == 0, "a second stop reported \(again.duration) ns after \(recorded.duration)")
        #expect(again.svgTimeline().contains("0 operations"))
    }

    @Test("SVG timeline: a width beyond the range is brought into it, not trapped on (probe 44)")
    func svgHugeWidth() async {
        await #expect(processExitsWith: .success) {
            #expect(OperationTracing.start())
            let operation = BlockOperation {}
            operation.name = "svg-wide"
            operation.start()
            let trace = OperationTracing.stop()
            let widest = trace.svgTimeline(width: .max)
            #expect(widest.contains("width=\"1000150\""))
            #expect((try? XMLDocument(xmlString: widest, options: [])) != nil)
            #expect(trace.svgTimeline(width: .min).contains("width=\"350\""))
        }
    }

    @Test("a stopped recorder records nothing, and only one recording runs at a time")
    func recorderSessions() {
        #expect(OperationTracing.start())
        #expect(!OperationTracing.start())
        #expect(OperationTracing.isRecording)
        _ = OperationTracing.stop()
        #expect(!OperationTracing.isRecording)
        let queue = makeQueue("unrecorded")
        let op = BlockOperation {}
        op.name = "unrecorded-op"
        queue.addOperations([op], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(OperationTracing.start())
        let trace = OperationTracing.stop()
        #expect(!trace.operations.contains { $0.name == "unrecorded-op" })
    }

    @Test("DOT: a quote or backslash followed by a combining mark is still escaped (regression: probe 23)")
    func dotQuotingByScalar() {
        let quoted = OperationGraph.quoted("say \"\u{301}hi\\\u{200D} end")
        #expect(quoted == "\"say \\\"\u{301}hi\\\\\u{200D} end\"", "\(quoted)")
        // Every quote inside is escaped: the literal ends only at its last character.
        let inner = quoted.unicodeScalars.dropFirst().dropLast()
        var escaped = false
        for scalar in inner {
            if scalar == "\"" { #expect(escaped, "an unescaped quote in \(quoted)") }
            escaped = scalar == "\\" && !escaped
        }
    }

    @Test("DOT: control characters (a NUL ends a GraphViz string) are replaced (regression: probe 25)")
    func dotControlCharacters() {
        let quoted = OperationGraph.quoted("a\u{0}b\u{1}c\rd\u{7F}e\tf\ng")
        #expect(quoted == "\"a\u{FFFD}b\u{FFFD}c\u{FFFD}d\u{FFFD}e f\\ng\"", "\(quoted)")
        let op = BlockOperation {}
        op.name = "nul\u{0}name"
        let dot = OperationGraph.dot(of: [op])
        #expect(!dot.unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" })
    }

    @Test("DOT: every operation once, every edge, states, and a kept cycle in red")
    func dotGraph() {
        let queue = makeQueue("dot-queue")
        queue.isSuspended = true
        func make(_ name: String) -> BlockOperation {
            let operation = BlockOperation {}
            operation.name = name
            return operation
        }
        let a = make("dot-a"), b = make("dot-b"), c = make("dot-c"), outside = make("dot-outside")
        b.addDependency(a)
        c.addDependency(b)
        a.addDependency(c)      // closes a cycle: kept, as in Foundation
        b.addDependency(outside)
        queue.addOperations([a, b, c], waitUntilFinished: false)
        let dot = queue.dependencyGraphDOT()
        #expect(dot.hasPrefix("digraph \"dot-queue\" {") && dot.hasSuffix("}\n"))
        for name in ["dot-a", "dot-b", "dot-c", "dot-outside"] {
            #expect(dot.components(separatedBy: "label=\"\(name)\\n").count - 1 == 1, "\(name) is not drawn exactly once")
        }
        #expect(dot.components(separatedBy: " -> ").count - 1 == 4)
        #expect(dot.components(separatedBy: "label=\"cycle\"").count - 1 == 3)
        #expect(dot.contains("dashed"), "a dependency outside the queue is not marked")
        #expect(dot.contains("no queue"))
        c.cancel()
        outside.cancel()
        outside.start()         // in no queue: finished by hand (cancelled, it skips its work)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        let finished = OperationGraph.dot(of: [a, b, c])
        #expect(!finished.contains("cycle") && finished.contains("finished"))
    }
}
