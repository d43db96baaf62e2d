"""The subset matcher behind every check's ``expect`` (FRR topotests' json_cmp):
what matches, and a difference that says where and how. No root."""
from hypothesis import given, settings
from hypothesis import strategies as st

from nslab.model.subset import ABSENT, MISSING, differences, matches, path_text, show

SUMMARY = {"ipv4Unicast": {"routerId": "10.0.100.2", "as": 65000, "peers": {
    "spine2-eth0": {"hostname": "server1", "remoteAs": 65001, "state": "Active", "pfxRcd": 0},
    "spine2-eth1": {"hostname": "server2", "remoteAs": 65002, "state": "Established",
                    "pfxRcd": 1}}}}


def lines(expected, seen):
    return [str(d) for d in differences(expected, seen)]


def test_a_subset_of_a_mapping_matches_and_extra_keys_are_ignored():
    assert matches({"ipv4Unicast": {"as": 65000}}, SUMMARY)
    assert matches({}, SUMMARY)
    assert differences({"ipv4Unicast": {"peers": {"spine2-eth1": {"state": "Established"}}}},
                       SUMMARY) == []


def test_a_wrong_value_is_named_by_its_path_with_both_values():
    want = {"ipv4Unicast": {"peers": {"spine2-eth0": {"state": "Established"}}}}
    assert not matches(want, SUMMARY)
    assert lines(want, SUMMARY) == [
        'ipv4Unicast.peers.spine2-eth0.state: expected "Established", saw "Active"']


def test_a_missing_key_and_a_key_that_must_be_absent():
    assert lines({"ipv4Unicast": {"ribCount": 3}}, SUMMARY) == [
        "ipv4Unicast.ribCount: missing (expected 3)"]
    assert lines({"ipv4Unicast": {"as": None}}, SUMMARY) == [
        "ipv4Unicast.as: expected absent, saw 65000"]
    assert matches({"ipv4Unicast": {"vrfName": None}}, SUMMARY)
    d = differences({"x": 1}, {})[0]
    assert (d.path, d.expected, d.seen) == ("x", "1", MISSING)
    d = differences({"x": None}, {"x": 2})[0]
    assert (d.expected, d.seen) == (ABSENT, "2")


def test_kinds_are_strict_but_numbers_compare_by_value():
    assert matches(2, 2.0) and matches({"a": 1}, {"a": 1.0})
    assert not matches(True, 1) and not matches(1, True)
    assert not matches("1", 1) and not matches(None, 0)
    assert lines({"a": "1"}, {"a": 1}) == ['a: expected "1", saw 1']
    assert lines({"a": {"b": 1}}, {"a": [1]}) == ['a: expected {"b": 1}, saw [1]']


def test_list_items_match_in_any_order_each_a_different_item():
    seen = [{"dev": "eth0", "gw": "a"}, {"dev": "eth1", "gw": "b"}]
    assert matches([{"dev": "eth1"}, {"dev": "eth0"}], seen)
    assert not matches([{"dev": "eth0"}, {"dev": "eth0"}], seen)  # one item cannot serve twice
    # a greedy pairing would give the first expected item the only match of the second
    assert matches([{"dev": "eth0"}, {"dev": "eth0", "gw": "a"}],
                   [{"dev": "eth0", "gw": "a"}, {"dev": "eth0", "gw": "z"}])


def test_an_unmatched_list_item_is_shown_against_the_closest_free_item():
    seen = [{"peer": "fe80::1", "status": "down"}, {"peer": "fe80::2", "status": "down"}]
    assert lines([{"peer": "fe80::2", "status": "up"}], seen) == [
        '[1].status: expected "up", saw "down"']
    # a tie goes to the first free item
    assert lines([{"peer": "fe80::9"}], seen) == ['[0].peer: expected "fe80::9", saw "fe80::1"']
    assert lines([5], [1, 2]) == ["[0]: missing (expected 5)"]
    assert lines([{"a": 1}], []) == ['[0]: missing (expected {"a": 1})']


def test_paths_quote_keys_that_are_not_plain_names_and_values_are_cut():
    assert path_text(("peers", "10.0.0.1", "state")) == 'peers["10.0.0.1"].state'
    assert path_text(("routes", 2, "dev")) == "routes[2].dev"
    assert len(show("x" * 500)) == 80 and show("x" * 500).endswith("...")
    assert lines({"10.0.0.0/24": [{"valid": True}]}, {}) == [
        '["10.0.0.0/24"]: missing (expected [{"valid": true}])']


def test_differences_stop_at_most():
    want = {f"k{i}": i for i in range(100)}
    assert len(differences(want, {}, most=7)) == 7
    assert len(differences(want, {})) == 20


# -- properties over any JSON -----------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                  max_size=4),
    max_leaves=20)


def _no_nulls_in_mappings(value):
    """A value whose mappings hold no None (None in ``expected`` means absent)."""
    if isinstance(value, dict):
        return {k: _no_nulls_in_mappings(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls_in_mappings(v) for v in value]
    return value


@st.composite
def value_and_part(draw):
    """A JSON value and a part of it (keys and list items dropped at random)."""
    value = _no_nulls_in_mappings(draw(json_values))

    def part(v):
        if isinstance(v, dict):
            keep = draw(st.lists(st.sampled_from(sorted(v)), unique=True)) if v else []
            return {k: part(v[k]) for k in keep}
        if isinstance(v, list):
            keep = draw(st.lists(st.sampled_from(range(len(v))), unique=True)) if v else []
            return [part(v[i]) for i in sorted(keep)]
        return v
    return value, part(value)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_every_value_matches_itself(value):
    value = _no_nulls_in_mappings(value)
    assert matches(value, value) and differences(value, value) == []


@settings(max_examples=300, deadline=None)
@given(value_and_part())
def test_every_part_of_a_value_matches_it(pair):
    value, part = pair
    assert matches(part, value), (part, value)


@settings(max_examples=300, deadline=None)
@given(json_values, json_values)
def test_no_differences_exactly_when_it_matches(expected, seen):
    assert (differences(expected, seen, most=1000) == []) == matches(expected, seen)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=5), json_values, max_size=4),
       st.text(min_size=1, max_size=5), json_values)
def test_a_key_seen_lacks_is_a_difference_naming_it(seen, key, want):
    seen = _no_nulls_in_mappings(seen)
    seen.pop(key, None)
    want = _no_nulls_in_mappings(want)
    if want is None:
        assert matches({key: None}, seen)
        return
    found = differences({key: want}, seen)
    assert len(found) == 1 and found[0].seen == MISSING
    assert found[0].path == path_text((key,))
