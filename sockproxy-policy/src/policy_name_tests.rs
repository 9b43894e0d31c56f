//! `policy::decide`'s table for names: creates and renames, images, and resolved IDs.
mod names {
    use crate::policy::tests::table::{container, scope};
    use crate::policy::*;

    #[test]
    fn create_needs_a_name_in_scope() {
        let create = |raw: Option<&str>, restricted: bool| {
            let q = match raw {
                Some(n) => Query::parse(Some(&format!("name={n}"))).expect("query"),
                None => Query::default(),
            };
            decide(&Endpoint::ContainerCreate, &q, &scope(restricted), &[])
                .map(|p| format!("{p:?}"))
                .map_err(|r| r.to_string())
        };
        let refused = |what: &str| {
            Err(format!(
                "sockproxy: containers.create: {what} is not one of this stack's sandboxes"
            ))
        };
        assert_eq!(
            create(Some("deer-flow-sandbox-1"), false),
            Ok("CreateContainer".into())
        );
        assert_eq!(
            create(Some("/deer-flow-sandbox-1"), false),
            Ok("CreateContainer".into())
        );
        assert_eq!(
            create(Some("deer-flow-netproxy-1"), false),
            refused("deer-flow-netproxy-1")
        );
        assert_eq!(create(Some("other"), false), refused("other"));
        assert_eq!(create(None, false), refused("a container without a name"));
        assert_eq!(
            create(Some("deer-flow-netproxy-1"), true),
            Ok("CreateContainer".into())
        );
    }

    /// A name with an inner `/` is a link alias to dockerd (`/parent/alias`), never a sandbox:
    /// refused on create and as a rename's new name, even when it starts with the stack's
    /// family, with the refusal naming it.
    #[test]
    fn inner_slashes_are_refused_on_create_and_rename() {
        let s = scope(false);
        let q = |raw: &str| Query::parse(Some(raw)).expect("query");
        let create = |name: &str| {
            decide(
                &Endpoint::ContainerCreate,
                &q(&format!("name={name}")),
                &s,
                &[],
            )
            .map(|_| ())
            .map_err(|r| r.to_string())
        };
        for name in [
            "deer-flow-sandbox-a/b",
            "/deer-flow-sandbox-a/b",
            "deer-flow-sandbox-a/",
        ] {
            let shown = name.strip_prefix('/').unwrap_or(name);
            assert_eq!(
                create(name),
                Err(format!(
                    "sockproxy: containers.create: {shown} is not one of this stack's sandboxes"
                )),
                "{name}"
            );
        }
        assert_eq!(create("deer-flow-sandbox-ab"), Ok(()));
        let rename = |new: &str| {
            decide(
                &container(ContainerOp::Rename, "deer-flow-sandbox-1"),
                &q(&format!("name={new}")),
                &s,
                &[],
            )
            .map(|_| ())
            .map_err(|r| r.to_string())
        };
        assert_eq!(
            rename("deer-flow-sandbox-a/b"),
            Err(
                "sockproxy: containers.rename: deer-flow-sandbox-a/b is not one of this stack's sandboxes"
                    .into()
            )
        );
        assert_eq!(rename("/deer-flow-sandbox-2"), Ok(()));
    }

    #[test]
    fn pulls_rename_and_events() {
        let s = scope(false);
        let q = |raw: &str| Query::parse(Some(raw)).expect("query");
        let allowed = vec!["busybox:latest".to_owned(), "ghcr.io/x/y:1".to_owned()];
        let pull = |raw: &str| {
            decide(&Endpoint::ImagePull, &q(raw), &s, &allowed)
                .map(|_| ())
                .map_err(|r| r.to_string())
        };
        assert_eq!(
            pull("fromImage=docker.io%2Flibrary%2Fbusybox&tag=latest"),
            Ok(())
        );
        assert_eq!(
            pull("fromImage=busybox"),
            Err(
                "sockproxy: images.pull: busybox names no tag or digest; pull one tag at a time"
                    .into()
            )
        );
        assert_eq!(pull("fromImage=busybox%3Alatest"), Ok(()));
        assert_eq!(pull("fromImage=busybox&tag=latest"), Ok(()));
        assert_eq!(pull("fromImage=ghcr.io%2Fx%2Fy&tag=1"), Ok(()));
        assert_eq!(
            pull("fromImage=ghcr.io%2Fx%2Fy&tag=2"),
            Err(
                "sockproxy: images.pull: ghcr.io/x/y:2 is not an allowed image (--allow-image)"
                    .into()
            )
        );
        assert_eq!(
            pull("fromSrc=-"),
            Err("sockproxy: images.import: not allowed for this stack".into())
        );
        // A digest-shaped tag would replace the checked digest in dockerd's reading.
        let digest = format!("sha256:{}", "a".repeat(64));
        let allowed_digest = vec![format!("busybox@{digest}")];
        let pull_digest = |raw: &str| {
            decide(&Endpoint::ImagePull, &q(raw), &s, &allowed_digest)
                .map(|_| ())
                .map_err(|r| r.to_string())
        };
        assert_eq!(
            pull_digest(&format!("fromImage=busybox%40{digest}")),
            Ok(())
        );
        assert_eq!(
            pull_digest(&format!("fromImage=busybox%40{digest}&tag=sha256%3A{}", "b".repeat(64))),
            Err(format!("sockproxy: images.pull: busybox@{digest} names a digest and a tag; pull by the digest alone"))
        );
        // The docker CLI's own shape of a digest pull.
        let hex = "a".repeat(64);
        assert_eq!(
            pull_digest(&format!("fromImage=busybox&tag=sha256%3A{hex}")),
            Ok(())
        );
        // A tagged name with a digest-shaped tag (dockerd would drop the tag) matches nothing.
        assert_eq!(
            pull_digest(&format!("fromImage=busybox%3Alatest&tag=sha256%3A{hex}")),
            Err(format!("sockproxy: images.pull: busybox:latest@sha256:{hex} is not an allowed image (--allow-image)"))
        );
        // `top` runs `ps` as root on the host with these options: only the plain ones pass.
        let top = |raw: &str| {
            decide(
                &container(ContainerOp::Top, "deer-flow-sandbox-1"),
                &q(raw),
                &s,
                &[],
            )
            .map(|_| ())
            .map_err(|r| r.to_string())
        };
        assert_eq!(top(""), Ok(()));
        assert_eq!(top("ps_args=-ef"), Ok(()));
        assert_eq!(top("ps_args=aux"), Ok(()));
        assert_eq!(
            top("ps_args=-ofname%3DA%2Clabel%3DPID%2Cargs%20--sort%3Dfname%20eww%20-N%20-p1"),
            Err("sockproxy: containers.top: ps_args \"-ofname=A,label=PID,args --sort=fname eww -N -p1\" is not allowed for this stack (allowed: -ef, aux)".into())
        );
        assert_eq!(
            pull(""),
            Err("sockproxy: images.pull:  names no tag or digest; pull one tag at a time".into())
        );
        let rename = |new: &str| {
            decide(
                &container(ContainerOp::Rename, "deer-flow-sandbox-1"),
                &q(&format!("name={new}")),
                &s,
                &[],
            )
            .map(|_| ())
            .map_err(|r| r.to_string())
        };
        assert_eq!(rename("deer-flow-sandbox-2"), Ok(()));
        assert_eq!(
            rename("other"),
            Err("sockproxy: containers.rename: other is not one of this stack's sandboxes".into())
        );
        assert_eq!(
            rename(""),
            Err("sockproxy: containers.rename:  is not one of this stack's sandboxes".into())
        );
        assert_eq!(
            decide(
                &container(ContainerOp::Rename, "other"),
                &q("name=deer-flow-sandbox-2"),
                &s,
                &[]
            )
            .map_err(|r| r.to_string()),
            Err("sockproxy: containers.rename: other is not one of this stack's sandboxes".into())
        );
        assert_eq!(
            decide(&Endpoint::Events, &Query::default(), &s, &[]),
            Ok(Route::Events)
        );
    }

    #[test]
    fn image_inspect_names_only_allowed_images_when_there_is_a_list() {
        let s = scope(false);
        let ep = |r: &str| Endpoint::ImageInspect {
            reference: r.into(),
        };
        let full = "b8".repeat(32);
        let allowed = vec!["sandbox:1".to_owned(), "busybox:latest".to_owned()];
        for r in ["sandbox:1", "busybox", "docker.io/library/busybox:latest"] {
            assert_eq!(
                decide(&ep(r), &Query::default(), &s, &allowed),
                Ok(Route::Forward),
                "{r}"
            );
        }
        for r in [full.clone(), format!("sha256:{full}")] {
            assert_eq!(
                decide(&ep(&r), &Query::default(), &s, &allowed),
                Ok(Route::Forward),
                "{r}"
            );
        }
        for (r, shown) in [
            ("b8", "b8:latest"),
            ("sha256:b8", "sha256:b8"),
            ("other-secretimg:1", "other-secretimg:1"),
            ("sandbox", "sandbox:latest"),
            (
                "deer-flow-sandbox-0123456789abcdef",
                "deer-flow-sandbox-0123456789abcdef:latest",
            ),
        ] {
            let e = decide(&ep(r), &Query::default(), &s, &allowed).expect_err(r);
            assert_eq!(e.status(), http::StatusCode::NOT_FOUND, "{r}");
            assert_eq!(e.to_string(), format!("No such image: {shown}"), "{r}");
        }
        // Without a list the stack may create from any image, and so inspect any.
        assert_eq!(
            decide(&ep("b8"), &Query::default(), &s, &[]),
            Ok(Route::Forward)
        );
    }

    #[test]
    fn resolved_ids_out_of_scope_look_absent_unless_visible() {
        let s = scope(false);
        let hex = ObjRef::Hex("abc".into());
        let got = check_resolved(
            Kind::Container,
            Access::Change,
            "containers.stop",
            &hex,
            "/other",
            &s,
        );
        assert_eq!(got, Err(Refusal::NoSuchContainer("abc".into())));
        let got = check_resolved(
            Kind::Container,
            Access::Change,
            "containers.stop",
            &hex,
            "/deer-flow-sandbox-1",
            &s,
        );
        assert_eq!(got, Ok(()));
        // A link alias is never a stack's own canonical name.
        let got = check_resolved(
            Kind::Container,
            Access::Read,
            "containers.inspect",
            &hex,
            "/deer-flow-x/alias",
            &s,
        );
        assert_eq!(got, Err(Refusal::NoSuchContainer("abc".into())));
        // (The alias is what is refused: the same container under its own name may be read.)
        let got = check_resolved(
            Kind::Container,
            Access::Read,
            "containers.inspect",
            &hex,
            "/deer-flow-x",
            &s,
        );
        assert_eq!(got, Ok(()));
        // A container the stack may see but not change (a leftover sidecar without
        // `--restricted`): by ID, refused by its name, not answered as absent.
        let got = check_resolved(
            Kind::Container,
            Access::Change,
            "containers.stop",
            &hex,
            "/deer-flow-netproxy-1",
            &s,
        );
        assert_eq!(
            got.map_err(|e| e.to_string()),
            Err("sockproxy: containers.stop: deer-flow-netproxy-1 is not one of this stack's sandboxes".into())
        );
        assert_eq!(
            check_exec(Access::Change, "e1", "/deer-flow-sandbox-1", &s),
            Ok(())
        );
        assert_eq!(
            check_exec(Access::Change, "e1", "/deer-flow-netproxy-1", &s),
            Err(Refusal::NoSuchExec("e1".into()))
        );
        assert_eq!(
            check_exec(Access::Read, "e1", "/deer-flow-netproxy-1", &s),
            Ok(())
        );
    }
}
