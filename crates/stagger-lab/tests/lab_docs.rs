//! The lab's page and its documentation name the same scenes: the Hedging
//! scene was on the page but missing from docs/lab.md.

#[test]
fn every_scene_on_the_page_is_named_in_docs_lab_md() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let page = include_str!("../src/lab/assets/index.html");
    let docs = std::fs::read_to_string(format!("{root}/docs/lab.md")).unwrap();
    let scenes: Vec<&str> = page
        .lines()
        .filter(|l| l.contains("data-scene="))
        .filter_map(|l| l.split(" · ").nth(1))
        .filter_map(|l| l.split("</button>").next())
        .collect();
    assert_eq!(scenes.len(), 8, "{scenes:?}");
    for name in scenes {
        assert!(
            docs.contains(&format!("*{name}*")),
            "docs/lab.md does not name the scene {name}"
        );
    }
}
