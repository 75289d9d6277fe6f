import Operations
import Synchronization

/// The state-sequences article's ticket office: 50 tickets sold by three windows, each a
/// serial queue, under one lock (the article's `NSLock`; here a `Mutex`).
final class TicketOffice: Sendable {
    // Sendable: `state` is a Mutex.
    /// One ticket sold: by which window, and how many were left after it.
    struct Sale: Sendable {
        let window: String
        let remaining: Int
    }

    private struct State {
        var remaining: Int
        var sales: [Sale] = []
        var soldOutNotices: [String: Int] = [:]
    }

    private let state: Mutex<State>
    private let log: DemoLog

    init(tickets: Int, log: DemoLog) {
        state = Mutex(State(remaining: tickets))
        self.log = log
    }

    /// The state-sequences article's `saleTicketNotSafe:`, made safe by the lock: sell until none are left.
    func sell(window: String) {
        while true {
            let soldOut = state.withLock { state -> Bool in
                if state.remaining > 0 {
                    state.remaining -= 1
                    state.sales.append(Sale(window: window, remaining: state.remaining))
                    log.note("tickets left: \(state.remaining)  window: \(window)")
                    return false
                }
                log.note("all tickets sold (window \(window) closes)")
                state.soldOutNotices[window, default: 0] += 1
                return true
            }
            if soldOut { return }
        }
    }

    var sales: [Sale] { state.withLock { $0.sales } }
    var remaining: Int { state.withLock { $0.remaining } }
    var soldOutNotices: [String: Int] { state.withLock { $0.soldOutNotices } }
}

/// `ticket-sale`: the state-sequences article's three serial queues selling 50 tickets
/// under a lock.
enum TicketSaleDemo {
    static let demo = DemoCase(
        name: "ticket-sale",
        summary: "three queues sell 50 tickets under a lock: each sold once, never below zero",
        sources: [DemoCitation(.stateSequencesArticle, "線程安全和線程同步 (thread safety and synchronisation): three windows (serial queues) sell 50 train tickets under a lock")],
        shows: "Operations on three queues, sharing a counter under a lock, sell each ticket once.",
        lookFor: "\"tickets left\" counts 49 down to 0 without repeat or gap, whichever window sells.",
        run: run
    )

    static let windows = ["Beijing 北京", "Shanghai 上海", "Shenzhen 深圳"]

    static func run(_ log: DemoLog) {
        log.section("1. three windows, one queue each (maxConcurrentOperationCount = 1), 50 tickets")
        let tickets = 50
        let office = TicketOffice(tickets: tickets, log: log)
        let queues = windows.map { window -> OperationQueue in
            let queue = OperationQueue()
            queue.name = window
            queue.maxConcurrentOperationCount = 1
            return queue
        }
        // The windows open together: each waits (bounded) until all three
        // are open, so that they really compete for the lock. Only two can
        // run on a two-core pool at first; the pool notices the blocked
        // workers and adds one.
        let opening = Rendezvous(parties: windows.count)
        let opened = Mutex(0)
        let recorder = StateRecorder(log: log)
        for (queue, window) in zip(queues, windows) {
            let sale = BlockOperation {
                log.note("window \(window) opens")
                if opening.arrive(seconds: 5) { opened.withLock { $0 += 1 } }
                office.sell(window: window)
            }
            recorder.watch(sale, as: window, printInitialValues: false)
            queue.addOperation(sale)
        }
        let drained = queues.map { $0.waitUntilAllOperationsAreFinished(timeout: .seconds(10)) }
        recorder.stop()

        let sales = office.sales
        log.say("")
        for window in windows {
            log.say("     \(window): sold \(sales.filter { $0.window == window }.count)")
        }
        log.check(drained.allSatisfy { $0 }, "all three windows closed within 10 s")
        log.check(opened.withLock { $0 } == windows.count, "the three windows were open at the same time",
                  detail: "only \(opened.withLock { $0 }) met within 5 s")
        log.check(sales.count == tickets, "exactly \(tickets) tickets were sold", detail: "\(sales.count) were sold")
        log.check(
            sales.map(\.remaining) == Array((0..<tickets).reversed()),
            "each ticket was sold once: the count went \(tickets - 1), \(tickets - 2), … 0 with no repeat or gap",
            detail: "counts after each sale: \(sales.map(\.remaining))"
        )
        log.check(office.remaining == 0 && sales.allSatisfy { $0.remaining >= 0 },
                  "the count never went below zero and ended at zero", detail: "it ended at \(office.remaining)")
        log.check(windows.allSatisfy { office.soldOutNotices[$0] == 1 },
                  "each window saw the tickets sold out exactly once, then closed",
                  detail: "notices: \(office.soldOutNotices)")
        for window in windows {
            log.checkStateChanges(of: window, equal: ["isExecuting NO→YES", "isExecuting YES→NO", "isFinished NO→YES"],
                                  "window \(window): its operation executed once, then finished")
        }
        let saleThreads = log.entries.filter { $0.text.hasPrefix("tickets left") }.map(\.thread)
        log.check(saleThreads.allSatisfy { $0.hasPrefix("ops.worker.") }, "every sale ran on a library worker thread",
                  detail: "threads: \(Set(saleThreads).sorted())")
    }
}
