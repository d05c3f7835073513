//! `[[budgets]]`, `[[rate_limits]]`, `[billing]` and `price`: what the config
//! accepts, and the errors (file, key, why) for what it refuses.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use intentgate::config::Config;

const BASE: &str = "[store]\nurl = \"sqlite:x.db\"\n\
    [[principals]]\nname = \"alice\"\nkey_sha256 = \"c3fe0b469a6d4f19a25fbec114762d2186aa2c22888f52c5550a77fc104bcff3\"\n\
    [[providers]]\nname = \"p\"\ndialect = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n";

fn parse(provider_extra: &str, rest: &str) -> Result<Config, String> {
    let text = format!("{BASE}{provider_extra}\n[[routes]]\nname = \"chat\"\nchain = [\"p\"]\n{rest}");
    Config::from_toml(Path::new("t.toml"), &text).map_err(|err| err.to_string())
}

#[test]
fn a_priced_provider_with_budgets_and_rate_limits_loads() {
    let config = parse(
        "price = { input_per_mtok = 0.15, output_per_mtok = 0.60, cached_input_per_mtok = 0.075 }",
        "[billing]\ncurrency = \"EUR\"\ndefault_max_tokens = 512\n\
         [[budgets]]\nowner = \"alice\"\nlimit = 5.00\nwindow = \"1d\"\n\
         [[budgets]]\nowner = \"*\"\nroute = \"*\"\nlimit = 100\nwindow = \"month\"\n\
         [[rate_limits]]\nowner = \"*\"\nroute = \"chat\"\nrequests_per_minute = 60\ntokens_per_minute = 100000\n",
    )
    .unwrap();
    assert_eq!(config.billing.currency, "EUR");
    assert_eq!(config.budgets[0].limit, 5_000_000_000, "limits are nano-units");
    assert!(config.providers[0].price.is_some());
    assert!(config.limits().meters_attempts("alice", "chat"));
    assert!(!config.limits().is_empty());
}

#[test]
fn mistakes_are_named_with_their_key() {
    let cases = [
        ("", "[[budgets]]\nowner = \"alcie\"\nlimit = 5\nwindow = \"1d\"\n", "budgets[0].owner"),
        (
            "",
            "[[budgets]]\nowner = \"alice\"\nroute = \"caht\"\nlimit = 5\nwindow = \"1d\"\n",
            "budgets[0].route",
        ),
        ("", "[[budgets]]\nowner = \"alice\"\nlimit = 5\nwindow = \"2d\"\n", "unknown window `2d`"),
        ("", "[[budgets]]\nowner = \"alice\"\nlimit = -1\nwindow = \"1d\"\n", "non-negative amount"),
        ("", "[[rate_limits]]\nowner = \"*\"\n", "sets neither requests_per_minute nor tokens_per_minute"),
        ("", "[[rate_limits]]\nrequests_per_minute = 0\n", "a limit of zero per minute"),
        ("", "[billing]\ncurrency = \"US Dollar\"\n", "billing.currency"),
        ("price = { input_per_mtok = 0.0000001, output_per_mtok = 1 }", "", "at most 6 decimals"),
        ("price = { input_per_mtok = 1 }", "", "output_per_mtok"),
        ("", "[[budgets]]\nowner = \"alice\"\nlimit = 5\nwindow = \"1d\"\ncap = 3\n", "unknown field `cap`"),
    ];
    for (provider_extra, rest, expected) in cases {
        let err = parse(provider_extra, rest).expect_err(rest);
        assert!(err.contains(expected), "`{provider_extra}{rest}`: expected `{expected}` in: {err}");
    }
}
