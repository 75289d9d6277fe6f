import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Names of threads, as the kernel knows them.
enum ThreadInfo {
    /// The calling thread's name from `/proc/thread-self/comm` (the library's
    /// workers are `ops.worker.N`), `main` for the process's main thread,
    /// and `dispatch` for Dispatch's own threads (named after their
    /// quality-of-service root queue, e.g. `oot.default-qos` once cut to 15
    /// bytes).
    static func label() -> String {
        if isMainThread { return "main" }
        guard let name = name() else { return "?" }
        if name.hasSuffix("-qos") || name.contains("-qos.") { return "dispatch" }
        return name
    }

    /// The calling thread's kernel name (at most 15 bytes), or nil.
    static func name() -> String? {
        #if os(Linux)
        let descriptor = open("/proc/thread-self/comm", O_RDONLY)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = read(descriptor, &buffer, 31)
        guard count > 0 else { return nil }
        var end = count
        while end > 0, buffer[end - 1] == 0x0A { end -= 1 }
        return String(decoding: buffer[0..<end], as: UTF8.self)
        #else
        var buffer = [CChar](repeating: 0, count: 64)
        guard pthread_getname_np(pthread_self(), &buffer, 64) == 0 else { return nil }
        return String(cString: buffer)
        #endif
    }

    /// Whether the calling thread is the process's main thread: on Linux,
    /// whether its thread id (the last component of `/proc/thread-self`)
    /// equals the process id.
    static var isMainThread: Bool {
        #if os(Linux)
        var buffer = [CChar](repeating: 0, count: 64)
        let length = readlink("/proc/thread-self", &buffer, 63)
        guard length > 0 else { return false }
        let link = String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let tid = link.split(separator: "/").last.flatMap({ Int32($0) }) else { return false }
        return tid == getpid()
        #else
        return pthread_main_np() != 0
        #endif
    }

    /// Names the calling thread (15 bytes at most are kept).
    static func setName(_ name: String) {
        let truncated = String(decoding: name.utf8.prefix(15), as: UTF8.self)
        #if os(Linux)
        let descriptor = open("/proc/thread-self/comm", O_WRONLY)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        _ = truncated.withCString { write(descriptor, $0, strlen($0)) }
        #elseif canImport(Darwin)
        _ = pthread_setname_np(truncated)
        #endif
    }

    /// The number of online processors.
    static let processorCount: Int = {
        let count = sysconf(Int32(_SC_NPROCESSORS_ONLN))
        return count > 0 ? count : 1
    }()
}

/// A thread of our own, outside the library's worker pool: the counterpart
/// of `NSThread detachNewThreadSelector:` in the documents.
enum DemoThread {
    private final class Start: Sendable {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }

    /// Starts a detached thread named `name` that runs `body` and exits.
    static func detach(name: String, _ body: @escaping @Sendable () -> Void) {
        let start = Unmanaged.passRetained(Start(name: name, body: body)).toOpaque()
        #if canImport(Glibc) || canImport(Musl)
        var thread = pthread_t()
        #else
        var thread: pthread_t?
        #endif
        let result = pthread_create(&thread, nil, { argument in
            guard let argument else { return nil }
            let start = Unmanaged<Start>.fromOpaque(argument).takeRetainedValue()
            ThreadInfo.setName(start.name)
            start.body()
            return nil
        }, start)
        guard result == 0 else {
            Unmanaged<Start>.fromOpaque(start).release()
            fatalError("ops demo: could not create a thread (pthread_create returned \(result))")
        }
        #if canImport(Glibc) || canImport(Musl)
        pthread_detach(thread)
        #else
        if let thread { pthread_detach(thread) }
        #endif
    }
}

/// A long-lived thread that runs submitted blocks one at a time, in order:
/// the counterpart of the concurrent-operation article's `threadForMyOperation`, a thread kept
/// alive by its run loop and fed with `performSelector:onThread:`.
final class SerialThread: Sendable {
    // Sendable: `pending` is a Mutex; `available` is a semaphore.
    private let pending = Mutex<[@Sendable () -> Void]>([])
    private let available = DispatchSemaphore(value: 0)

    /// Starts the thread. It lives until the process exits.
    init(name: String) {
        DemoThread.detach(name: name) { [self] in
            while true {
                available.wait()
                let block = pending.withLock { $0.removeFirst() }
                block()
            }
        }
    }

    /// Runs `block` on the thread after the blocks submitted before it.
    func perform(_ block: @escaping @Sendable () -> Void) {
        pending.withLock { $0.append(block) }
        available.signal()
    }
}

/// A latch: closed until ``open()``, then open for good. Waits are bounded.
final class Gate: Sendable {
    // Sendable: `isOpen` is a Mutex; `semaphore` is thread-safe.
    private let isOpen = Mutex(false)
    private let semaphore = DispatchSemaphore(value: 0)

    /// Opens the gate and releases every waiter, present and future.
    func open() {
        let wasOpen = isOpen.withLock { open in
            defer { open = true }
            return open
        }
        if !wasOpen { semaphore.signal() }
    }

    /// Waits until the gate opens or `seconds` pass. Returns whether it opened.
    func wait(seconds: Int = 5) -> Bool {
        if isOpen.withLock({ $0 }) { return true }
        guard semaphore.wait(timeout: .now() + .seconds(seconds)) == .success else {
            return isOpen.withLock { $0 }
        }
        // Pass the wake-up on to the next waiter.
        semaphore.signal()
        return true
    }
}

/// A meeting point for `parties` threads: each ``arrive(seconds:)`` returns
/// once all parties have arrived (true) or the time is up (false). Used to
/// prove that work runs at the same time, instead of sleeping and hoping.
final class Rendezvous: Sendable {
    // Sendable: `arrived` is a Mutex; `everyone` is a Gate.
    private let parties: Int
    private let arrived = Mutex(0)
    private let everyone = Gate()

    init(parties: Int) {
        self.parties = parties
    }

    /// Arrives and waits for the other parties.
    func arrive(seconds: Int = 5) -> Bool {
        let count = arrived.withLock { count in
            count += 1
            return count
        }
        if count >= parties { everyone.open() }
        return everyone.wait(seconds: seconds)
    }

    /// Whether running things at the same time can be demanded here: the
    /// library's pool has as many workers as processors, so two pool
    /// operations can only be required to overlap with at least two.
    static var poolCanOverlap: Bool { ThreadInfo.processorCount >= 2 }
}

/// Unbuffered output: every line reaches the terminal or pipe at once, so
/// that nothing is lost if the process traps (a library misuse) or the
/// watchdog ends it.
enum Console {
    /// Writes `text` and a newline to standard output.
    static func line(_ text: String) {
        writeAll(text + "\n", to: 1)
    }

    /// Writes `text` to standard error.
    static func error(_ text: String) {
        writeAll(text, to: 2)
    }

    private static func writeAll(_ text: String, to descriptor: Int32) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeMutableBytes { buffer in
                write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
            }
            if written < 0 {
                if errno == EINTR { continue }
                return
            }
            offset += written
        }
    }
}

/// Ends the process with a clear message if a demo runs too long, so that a
/// library hang becomes a failure instead of a stuck command.
final class Watchdog: Sendable {
    private let done = DispatchSemaphore(value: 0)

    /// Arms a watchdog for the demo `name`.
    init(demo name: String, seconds: Int) {
        DemoThread.detach(name: "demo.watchdog") { [done] in
            if done.wait(timeout: .now() + .seconds(seconds)) == .success { return }
            let message = "\n✗ FAILED: demo \(name) did not finish within \(seconds) s; something it waits for never happened (see the last lines above).\n"
            Console.error(message)
            _exit(3)
        }
    }

    /// Disarms the watchdog.
    func disarm() {
        done.signal()
    }
}
