#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
@preconcurrency import Darwin
#endif

// The command line of `ops`, parsed without a dependency, so that a package
// that depends only on the `Operations` library fetches nothing else.

/// A bad argument: printed with the command's usage, exit status 64.
struct UsageError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}

/// What a subcommand accepts, for parsing and for `--help`.
struct CommandSpec {
    /// One option or flag.
    struct Option {
        /// The long name without dashes, e.g. `max-run-seconds`.
        let name: String
        /// The value's placeholder (`<seconds>`), or nil for a flag.
        let value: String?
        let help: String
    }

    /// One positional argument.
    struct Positional {
        let name: String
        let help: String
    }

    let name: String
    let abstract: String
    let discussion: String
    let options: [Option]
    let positionals: [Positional]

    /// The usage line: `ops bench [--quick] [--only <rows>] …`.
    var usage: String {
        var parts = ["ops", name]
        for option in options {
            parts.append(option.value.map { "[--\(option.name) <\($0)>]" } ?? "[--\(option.name)]")
        }
        for positional in positionals { parts.append("[<\(positional.name)>]") }
        return parts.joined(separator: " ")
    }

    /// The text `ops NAME --help` prints.
    var help: String {
        var lines = ["OVERVIEW: \(abstract)", ""]
        if !discussion.isEmpty {
            lines += TextLayout.wrap(discussion, first: "", rest: "")
            lines.append("")
        }
        lines.append("USAGE: \(usage)")
        if !positionals.isEmpty {
            lines += ["", "ARGUMENTS:"]
            for positional in positionals {
                lines += TextLayout.wrap(positional.help, first: "  " + TextLayout.pad("<\(positional.name)>", to: 26), rest: String(repeating: " ", count: 28))
            }
        }
        lines += ["", "OPTIONS:"]
        for option in options + [Option(name: "help", value: nil, help: "Show help information.")] {
            let label = "--\(option.name)" + (option.value.map { " <\($0)>" } ?? "")
            if label.count >= 26 {
                lines.append("  " + label)
                lines += TextLayout.wrap(option.help, first: String(repeating: " ", count: 28), rest: String(repeating: " ", count: 28))
            } else {
                lines += TextLayout.wrap(option.help, first: "  " + TextLayout.pad(label, to: 26), rest: String(repeating: " ", count: 28))
            }
        }
        return lines.joined(separator: "\n")
    }

    /// Parses `arguments` (after the subcommand's name). `--name value` and
    /// `--name=value` both work; an option's value is the next word even if
    /// it starts with `-`, so that `--minutes -1` is refused with a message
    /// about the value rather than "missing value".
    func parse(_ arguments: [String]) throws(UsageError) -> ParsedArguments {
        var parsed = ParsedArguments()
        var index = 0
        while index < arguments.count {
            let word = arguments[index]
            index += 1
            if word == "--help" || word == "-h" {
                parsed.wantsHelp = true
                continue
            }
            guard word.hasPrefix("--") else {
                guard parsed.positionals.count < positionals.count else {
                    throw UsageError("Unexpected argument '\(word)'.")
                }
                parsed.positionals.append(word)
                continue
            }
            var name = String(word.dropFirst(2))
            var inlineValue: String?
            if let equals = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            guard let option = options.first(where: { $0.name == name }) else {
                throw UsageError("Unknown option '--\(name)'.")
            }
            guard option.value != nil else {
                if inlineValue != nil { throw UsageError("--\(name) takes no value.") }
                parsed.flags.insert(name)
                continue
            }
            if let inlineValue {
                parsed.values[name] = inlineValue
            } else {
                guard index < arguments.count else { throw UsageError("Missing value for '--\(name) <\(option.value!)>'.") }
                parsed.values[name] = arguments[index]
                index += 1
            }
        }
        return parsed
    }
}

/// The words of a command line, sorted out.
struct ParsedArguments {
    var positionals: [String] = []
    var values: [String: String] = [:]
    var flags: Set<String> = []
    var wantsHelp = false

    func flag(_ name: String) -> Bool { flags.contains(name) }

    func string(_ name: String) -> String? { values[name] }

    func integer<Value: FixedWidthInteger>(_ name: String, as type: Value.Type = Value.self) throws(UsageError) -> Value? {
        guard let text = values[name] else { return nil }
        guard let value = Value(text) else {
            // The command's own check names the range it accepts; this
            // one only says what the text is not.
            throw UsageError("--\(name) takes a whole number; got '\(text)'.")
        }
        return value
    }

    func number(_ name: String) throws(UsageError) -> Double? {
        guard let text = values[name] else { return nil }
        guard let value = Double(text), value.isFinite else {
            throw UsageError("--\(name) takes a number; got '\(text)'.")
        }
        return value
    }
}

/// A subcommand of `ops`.
protocol OpsCommand {
    static var spec: CommandSpec { get }
    /// Reads and checks the arguments; throws for anything wrong.
    init(_ arguments: ParsedArguments) throws(UsageError)
    /// Runs the command; returns the exit status.
    func run() async -> Int32
}

extension OpsCommand {
    /// Parses `arguments` and runs the command, or prints help or a usage
    /// error (status 64).
    static func main(_ arguments: [String]) async -> Int32 {
        do {
            let parsed = try spec.parse(arguments)
            if parsed.wantsHelp {
                Console.line(spec.help)
                return 0
            }
            return try await Self(parsed).run()
        } catch {
            Console.error("Error: \(error.message)\nUsage: \(spec.usage)\n  See 'ops \(spec.name) --help' for more information.\n")
            return 64
        }
    }
}
