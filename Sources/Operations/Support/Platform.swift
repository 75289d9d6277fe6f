#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Thin wrappers over the operating system calls the scheduler needs, kept
/// in one place so that the rest of the library reads as Swift.
enum Platform {
    /// Online processors, at least 1.
    static let processorCount: Int = {
        let count = sysconf(Int32(_SC_NPROCESSORS_ONLN))
        return count > 0 ? count : 1
    }()

    /// The kernel's id for the calling thread (Linux), or 0 where unknown.
    ///
    /// Glibc's `gettid()` is not visible to Swift, so this reads the
    /// `/proc/thread-self` link once per thread; callers cache the result.
    static func currentThreadID() -> Int32 {
        #if os(Linux)
        var buffer = [CChar](repeating: 0, count: 64)
        let length = readlink("/proc/thread-self", &buffer, 63)
        guard length > 0 else { return 0 }
        var value: Int32 = 0
        // The link reads "<pid>/task/<tid>"; take the digits after the last '/'.
        for byte in buffer[0..<length] {
            if byte == 0x2F { value = 0; continue }
            guard byte >= 0x30, byte <= 0x39 else { continue }
            value = value &* 10 &+ Int32(byte - 0x30)
        }
        return value
        #else
        return 0
        #endif
    }

    /// An identity for the calling thread, unique among the threads alive
    /// at the same time: the `pthread_t` handle.
    @inline(__always)
    static func currentThreadToken() -> UInt {
        #if canImport(Glibc)
        return UInt(pthread_self())
        #else
        return UInt(bitPattern: pthread_self())
        #endif
    }

    /// Whether the calling thread is the process's main thread.
    static func isMainThread(threadID: Int32) -> Bool {
        #if os(Linux)
        return threadID != 0 && threadID == getpid()
        #elseif canImport(Darwin)
        return pthread_main_np() != 0
        #else
        return false
        #endif
    }

    /// Starts a detached thread that names itself `name` (when given) and
    /// runs `body`. Returns `pthread_create`'s status: 0 on success, else the
    /// error, in which case `body` never runs and is released here.
    ///
    /// The pool's workers, its monitor and the drain-loop watcher start
    /// their threads here; each caller decides what a failure means.
    static func startDetachedThread(named name: String?, _ body: @escaping @Sendable () -> Void) -> Int32 {
        // Retained for the new thread, which takes the reference back; on
        // failure it is given back below.
        let box = Unmanaged.passRetained(ThreadStart(name: name, body: body)).toOpaque()
        #if canImport(Darwin)
        var thread: pthread_t?
        #else
        var thread = pthread_t()
        #endif
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        let status = pthread_create(&thread, &attributes, { argument in
            #if canImport(Darwin)
            let start = Unmanaged<ThreadStart>.fromOpaque(argument).takeRetainedValue()
            #else
            let start = Unmanaged<ThreadStart>.fromOpaque(argument!).takeRetainedValue()
            #endif
            if let name = start.name { Platform.setCurrentThreadName(name) }
            start.body()
            return nil
        }, box)
        pthread_attr_destroy(&attributes)
        if status != 0 { Unmanaged<ThreadStart>.fromOpaque(box).release() }
        return status
    }

    /// Names the calling thread (visible in `top -H`, debuggers and crash logs).
    static func setCurrentThreadName(_ name: String) {
        #if os(Linux)
        let descriptor = open("/proc/thread-self/comm", O_WRONLY)
        guard descriptor >= 0 else { return }
        let truncated = String(name.utf8.prefix(15)) ?? name
        _ = truncated.withCString { write(descriptor, $0, strlen($0)) }
        close(descriptor)
        #elseif canImport(Darwin)
        _ = name.withCString { pthread_setname_np($0) }
        #endif
    }

    // MARK: Thread priority

    /// The calling thread's nice value (Linux: per thread), or nil if unknown.
    static func currentNice() -> Int32? {
        #if os(Linux)
        errno = 0
        let value = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        return errno == 0 ? value : nil
        #else
        return nil
        #endif
    }

    /// Sets the calling thread's nice value. On Linux `who == 0` names the
    /// calling thread, not the whole process. Returns false when the system
    /// refuses (raising priority needs `CAP_SYS_NICE` or `RLIMIT_NICE`).
    @discardableResult
    static func setCurrentNice(_ value: Int32) -> Bool {
        #if os(Linux)
        let clamped = min(19, max(-20, value))
        return setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, clamped) == 0
        #else
        return false
        #endif
    }

    /// Whether this process may lower nice values (raise priority), so that a
    /// priority change can always be undone. True for root, or when
    /// `RLIMIT_NICE` allows going back to the default.
    static let canRaisePriority: Bool = {
        #if os(Linux)
        if geteuid() == 0 { return true }
        var limit = rlimit()
        // RLIMIT_NICE is 13 on Linux; the constant is not imported into Swift.
        guard getrlimit(__rlimit_resource_t(13), &limit) == 0 else { return false }
        // The ceiling is 20 - rlim_cur: a limit of 20 or more allows nice 0.
        return limit.rlim_cur == rlim_t.max || limit.rlim_cur >= 20
        #else
        return false
        #endif
    }()

    /// The nanoseconds a thread of this process has spent on a processor or
    /// waiting for one (runnable), from `/proc/self/task/<tid>/schedstat`
    /// (fields 1 and 2), or nil where the kernel does not provide them.
    /// Wall time minus this is the time the thread slept (blocked).
    static func threadBusyNanoseconds(threadID: Int32) -> UInt64? {
        #if os(Linux)
        guard threadID > 0 else { return nil }
        return readBusyNanoseconds(path: "/proc/self/task/\(threadID)/schedstat")
        #else
        return nil
        #endif
    }

    /// Whether `threadBusyNanoseconds` works here: the kernel keeps
    /// scheduler statistics (see `schedstatKeepsStatistics`). A kernel that
    /// keeps none reports zeros, which would make every thread look asleep.
    static let providesThreadBusyTime: Bool = {
        guard let fields = callingThreadSchedstat else { return false }
        return schedstatKeepsStatistics(fields)
    }()

    /// The calling thread's schedstat line, or nil where there is none.
    static var callingThreadSchedstat: Schedstat? {
        #if os(Linux)
        return readSchedstat(path: "/proc/thread-self/schedstat")
        #else
        return nil
        #endif
    }

    /// Whether a thread's own schedstat line (run time, runqueue wait, time
    /// slices) shows statistics being kept. The reading thread is running,
    /// so it has had a time slice; its run time, though, is accounted
    /// lazily, and a young thread reads `0 0 1`. Judging by the run time
    /// alone turned the sleep-share rule off for the whole process whenever
    /// the pool started on such a thread, and blocking operations then got
    /// no more threads than processors (W10, three runs in four).
    static func schedstatKeepsStatistics(_ fields: Schedstat) -> Bool {
        fields.runNanoseconds > 0 || fields.waitNanoseconds > 0 || fields.timeslices > 0
    }

    /// The fields of a `/proc/…/schedstat` line.
    struct Schedstat: Equatable {
        var runNanoseconds: UInt64
        var waitNanoseconds: UInt64
        var timeslices: UInt64
    }

    /// Parses `"<run ns> <runqueue wait ns> <timeslices>\n"`; nil unless it
    /// holds at least the first two numbers (a missing third reads 0).
    static func parseSchedstat<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> Schedstat? {
        // Three fields, kept in locals: the pool's monitor parses on every
        // tick, and an array would cost an allocation each time.
        var run: UInt64 = 0
        var wait: UInt64 = 0
        var timeslices: UInt64 = 0
        var field = 0
        var digits = 0
        for byte in bytes {
            if byte >= 0x30, byte <= 0x39 {
                let digit = UInt64(byte - 0x30)
                switch field {
                case 0: run = run &* 10 &+ digit
                case 1: wait = wait &* 10 &+ digit
                default: timeslices = timeslices &* 10 &+ digit
                }
                digits += 1
            } else if digits > 0 {
                field += 1
                digits = 0
                if field == 3 { break }
            }
        }
        if digits > 0 { field += 1 }
        guard field >= 2 else { return nil }
        return Schedstat(runNanoseconds: run, waitNanoseconds: wait, timeslices: timeslices)
    }

    #if os(Linux)
    private static func readBusyNanoseconds(path: String) -> UInt64? {
        readSchedstat(path: path).map { $0.runNanoseconds &+ $0.waitNanoseconds }
    }

    private static func readSchedstat(path: String) -> Schedstat? {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 96) { buffer -> Schedstat? in
            let count = read(descriptor, buffer.baseAddress, 96)
            guard count > 0 else { return nil }
            return parseSchedstat(UnsafeBufferPointer(rebasing: buffer[0..<count]))
        }
    }
    #endif

    /// The scheduler state letter of a thread of this process (`R` running,
    /// `S` sleeping, `D` uninterruptible I/O, ...), or nil.
    static func threadState(threadID: Int32) -> UInt8? {
        #if os(Linux)
        guard threadID > 0 else { return nil }
        let descriptor = open("/proc/self/task/\(threadID)/stat", O_RDONLY)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 128)
        let count = read(descriptor, &buffer, 128)
        guard count > 0 else { return nil }
        // Format: "tid (comm) S ..." and comm may contain spaces or ')'.
        guard let close = buffer[0..<count].lastIndex(of: 0x29), close + 2 < count else { return nil }
        return buffer[close + 2]
        #else
        return nil
        #endif
    }
}

/// What a thread started by `Platform.startDetachedThread(named:_:)` runs.
private final class ThreadStart: Sendable {
    let name: String?
    let body: @Sendable () -> Void

    init(name: String?, body: @escaping @Sendable () -> Void) {
        self.name = name
        self.body = body
    }
}
