/// The version of this package: the one place it is written down.
///
/// `ops --version` prints it, `ops bench --format json` records it, and
/// CHANGELOG.md names the same version in its newest released section.
/// Bump it when a release is tagged (and say so in CHANGELOG.md).
let operationsVersion = "0.1.0"
