//! `themisto --version`: the version, then one line naming the kernels the
//! native engine's matmul dispatch picks on this CPU, a known set that
//! agrees with what the CPU has; `THEMISTO_NATIVE_KERNELS=scalar` shows in it.

use std::process::Command;

/// Every set the line may name.
const KNOWN: [&str; 5] = ["avx512+vnni+amx", "avx512+vnni", "avx2+fma+avx-vnni", "avx2+fma", "portable"];

fn version(kernels_env: Option<&str>) -> Vec<String> {
    let mut c = Command::new(env!("CARGO_BIN_EXE_themisto"));
    c.arg("--version").env_remove("THEMISTO_NATIVE_KERNELS").env_remove("THEMISTO_NO_AMX");
    if let Some(k) = kernels_env {
        c.env("THEMISTO_NATIVE_KERNELS", k);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().lines().map(str::to_string).collect()
}

/// The set named on a kernels line.
fn set(line: &str) -> &str {
    let rest = line.strip_prefix("kernels: ").unwrap_or_else(|| panic!("not a kernels line: {line:?}"));
    rest.split(' ').next().unwrap()
}

#[test]
fn version_names_the_kernels_of_this_cpu() {
    let lines = version(None);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0], format!("themisto {}", env!("CARGO_PKG_VERSION")));
    let named = set(&lines[1]);
    assert!(KNOWN.contains(&named), "{named:?} is not one of {KNOWN:?}");
    #[cfg(target_arch = "x86_64")]
    {
        let avx512 = ["avx512f", "avx512bw", "avx512vl", "avx512vnni"];
        let has = |f: &str| match f {
            "avx2" => std::arch::is_x86_feature_detected!("avx2"),
            "fma" => std::arch::is_x86_feature_detected!("fma"),
            "f16c" => std::arch::is_x86_feature_detected!("f16c"),
            "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
            "avx512bw" => std::arch::is_x86_feature_detected!("avx512bw"),
            "avx512vl" => std::arch::is_x86_feature_detected!("avx512vl"),
            "avx512vnni" => std::arch::is_x86_feature_detected!("avx512vnni"),
            _ => unreachable!(),
        };
        let simd = ["avx2", "fma", "f16c"].iter().all(|f| has(f));
        let want_prefix = match (simd, avx512.iter().all(|f| has(f))) {
            (true, true) => "avx512+vnni",
            (true, false) => "avx2+fma",
            (false, _) => "portable",
        };
        assert!(named.starts_with(want_prefix), "{named:?} on a CPU where the dispatch picks {want_prefix}");
    }
    // The same line the library gives this process (when its environment
    // forces nothing either).
    if std::env::var_os("THEMISTO_NATIVE_KERNELS").is_none() && std::env::var_os("THEMISTO_NO_AMX").is_none() {
        assert_eq!(lines[1], themisto::model::native::kernels_line());
    }
    // A forced set shows.
    assert_eq!(version(Some("scalar"))[1], "kernels: portable (portable)");
    // `-V` stays one line; a subcommand's --version has the line too.
    let short = Command::new(env!("CARGO_BIN_EXE_themisto")).arg("-V").output().unwrap();
    assert_eq!(String::from_utf8(short.stdout).unwrap().lines().count(), 1);
    let sub = Command::new(env!("CARGO_BIN_EXE_themisto")).args(["run", "--version"]).output().unwrap();
    assert!(String::from_utf8(sub.stdout).unwrap().contains("\nkernels: "));
}
