//! docs/guides/own-worker.md shows the `service` handler (on the `cron-fanout-handler`
//! package) the end-to-end suite runs,
//! `examples/service-handler/src/index.ts`, as it is.

#[test]
fn the_page_shows_the_example_handler_word_for_word() {
    let handler = include_str!("../examples/service-handler/src/index.ts");
    let page = include_str!("../docs/guides/own-worker.md");
    assert!(
        page.contains(&format!("```ts\n{handler}```")),
        "docs/guides/own-worker.md must show examples/service-handler/src/index.ts as it is"
    );
}

#[test]
fn the_example_worker_is_the_one_its_config_names() {
    let config = include_str!("../examples/service-handler/wrangler.toml");
    assert!(config.contains("name = \"service-handler\""), "{config}");
    assert!(config.contains("main = \"src/index.ts\""), "{config}");
}
