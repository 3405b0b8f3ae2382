"""EAGLE drafters: checkpoint layouts, lossless chains and trees, feature alignment, training."""

import json

import pytest
import torch
from conftest import NUM_LAYERS, assert_same_up_to_near_tie, reference_greedy, skip_sets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file
from transformers import LlamaConfig

from specsparse.decoding.engine import speculative_generate
from specsparse.decoding.models import tiny_model
from specsparse.decoding.session import ModelSession
from specsparse.decoding.skipping import FINAL_HIDDEN
from specsparse.drafters.eagle import EagleDrafter
from specsparse.drafters.eagle.checkpoint import load_eagle_head, save_eagle_head
from specsparse.drafters.eagle.head import EagleHead, EagleLoadError, eagle3_feature_layers
from specsparse.drafters.eagle.recipe import TrainingRecipe
from specsparse.drafters.eagle.training import train_eagle_head
from specsparse.types import GenerationConfig

HIDDEN = 48


def head_config(vocab_size: int) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=1,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)


def random_head(target, layout: str, trimmed: bool = False, seed: int = 0) -> EagleHead:
    torch.manual_seed(seed)
    vocab = target.config.vocab_size
    layers = (FINAL_HIDDEN,) if layout == "eagle" else eagle3_feature_layers(NUM_LAYERS)
    head = EagleHead(head_config(vocab), layout, layers, HIDDEN, fc_bias=layout == "eagle",
                     draft_to_target=torch.arange(0, vocab, 3) if trimmed else None)
    return head.eval()


STATIC = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 0, 0, 0]]


def drafter_for(target, head, tree=None) -> EagleDrafter:
    """tree: None (chains), (top_k, total) (dynamic) or "static" (`STATIC` choices)."""
    if tree == "static":
        return EagleDrafter(head, target, tree_choices=STATIC)
    return EagleDrafter(head, target, tree)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, models):
    """A head trained for a few seconds on the tiny target's own replies: it drafts well enough
    that acceptance, trees and cache compaction are exercised."""
    from specsparse.decoding.models import LoadedModel, tiny_tokenizer

    target = LoadedModel(models[0], tiny_tokenizer(), {"name": "tiny-test"})
    prompts = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"count {i} {i + 1} {i + 2} and say more {i * 7}"}) + "\n"
                               for i in range(48)))
    out = train_eagle_head(target, tmp_path_factory.mktemp("eagle") / "head",
                           TrainingRecipe(prompts=str(prompts), max_new_tokens=48, epochs=30, learning_rate=1e-2,
                                          batch_size=4, target_top_k=256))
    return load_eagle_head(str(out), models[0].config, NUM_LAYERS), json.loads((out / "training.json").read_text()), out


# -- checkpoints ------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout,trimmed", [("eagle", False), ("eagle", True), ("eagle3", False), ("eagle3", True)])
def test_a_saved_head_loads_back_identically(models, tmp_path, layout, trimmed):
    head = random_head(models[0], layout, trimmed)
    save_eagle_head(head, tmp_path)
    loaded = load_eagle_head(str(tmp_path), models[0].config, NUM_LAYERS)
    assert loaded.layout == layout and loaded.feature_layers == head.feature_layers
    assert set(loaded.state_dict()) == set(head.state_dict())
    for name, tensor in head.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name


def test_a_head_with_its_own_vocabulary_is_refused_by_the_vocabulary_search_before_loading(models, tmp_path):
    from conftest import plan_for

    from specsparse.drafters.eagle.checkpoint import own_vocabulary
    from specsparse.jobs.config import ConfigError

    for layout, trimmed, refused in (("eagle", False, None), ("eagle", True, "trimmed"), ("eagle3", False, None),
                                     ("eagle3", True, "trimmed")):
        save_eagle_head(random_head(models[0], layout, trimmed), tmp_path / f"{layout}{trimmed}")
        reason = own_vocabulary(str(tmp_path / f"{layout}{trimmed}"))
        assert reason is None if refused is None else refused in reason
    assert own_vocabulary(str(tmp_path / "not-trained-yet")) is None
    with pytest.raises(ConfigError, match="trimmed vocabulary of its own"):
        plan_for(["model=tiny", "search=tpe_vocab", "drafter=eagle", f"drafter.path={tmp_path / 'eagle3True'}"],
                 tmp_path)


def test_official_eagle1_layout_loads(models, tmp_path):
    """EAGLE-1/2 as released: pytorch_model.bin with fc (bias), layers.0.* without an input norm,
    the embedding included, and a plain LlamaConfig."""
    vocab = models[0].config.vocab_size
    torch.manual_seed(1)
    state = {"fc.weight": torch.randn(HIDDEN, 2 * HIDDEN), "fc.bias": torch.randn(HIDDEN),
             "embed_tokens.weight": torch.randn(vocab, HIDDEN),
             "layers.0.post_attention_layernorm.weight": torch.rand(HIDDEN)}
    kv = 2 * HIDDEN // 4
    for name, shape in {"q_proj": (HIDDEN, HIDDEN), "k_proj": (kv, HIDDEN), "v_proj": (kv, HIDDEN),
                        "o_proj": (HIDDEN, HIDDEN)}.items():
        state[f"layers.0.self_attn.{name}.weight"] = torch.randn(shape)
    for name, shape in {"gate_proj": (96, HIDDEN), "up_proj": (96, HIDDEN), "down_proj": (HIDDEN, 96)}.items():
        state[f"layers.0.mlp.{name}.weight"] = torch.randn(shape)
    torch.save(state, tmp_path / "pytorch_model.bin")
    config = head_config(vocab).to_dict() | {"architectures": ["LlamaForCausalLM"], "bias": True}
    (tmp_path / "config.json").write_text(json.dumps(config, default=str))
    head = load_eagle_head(str(tmp_path), models[0].config, NUM_LAYERS)
    assert head.layout == "eagle" and head.feature_layers == (FINAL_HIDDEN,) and head.draft_to_target is None
    assert torch.equal(head.fc.bias, state["fc.bias"])
    assert torch.equal(head.self_attn.k_proj.weight, state["layers.0.self_attn.k_proj.weight"])
    assert torch.equal(head.mlp.down_proj.weight, state["layers.0.mlp.down_proj.weight"])


def test_official_eagle3_layout_loads_with_its_draft_vocabulary(models, tmp_path):
    """EAGLE-3: midlayer.* with 2h attention inputs, fc over 3 fused layers, own norm and head over a
    draft vocabulary with d2t (target = draft + d2t[draft]) and t2d, config with draft_vocab_size."""
    vocab = models[0].config.vocab_size
    used = torch.tensor([2, 3, 5, 8, 13, 21, 34, 55])
    head = random_head(models[0], "eagle3")
    state = {("midlayer." + k if k.startswith(("self_attn", "mlp", "post_att", "input_lay", "hidden_norm")) else k): v
             for k, v in head.state_dict().items() if not k.startswith("rotary") and k != "lm_head.weight"}
    state["lm_head.weight"] = torch.randn(len(used), HIDDEN)
    state["d2t"] = used - torch.arange(len(used))
    state["t2d"] = torch.zeros(vocab, dtype=torch.bool).index_fill_(0, used, True)
    save_file(state, str(tmp_path / "model.safetensors"))
    config = head_config(vocab).to_dict() | {"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": len(used)}
    (tmp_path / "config.json").write_text(json.dumps(config, default=str))
    loaded = load_eagle_head(str(tmp_path), models[0].config, NUM_LAYERS)
    assert loaded.layout == "eagle3" and loaded.feature_layers == eagle3_feature_layers(NUM_LAYERS)
    assert loaded.draft_to_target.tolist() == used.tolist()
    assert EagleDrafter(loaded, models[0]).target_ids(torch.tensor([0, 7])).tolist() == [2, 55]
    assert loaded.self_attn.q_proj.weight.shape == (HIDDEN, 2 * HIDDEN)


def test_unusable_checkpoints_fail_in_one_line(models, tmp_path):
    with pytest.raises(EagleLoadError, match="not a directory"):
        load_eagle_head(str(tmp_path / "missing"), models[0].config, NUM_LAYERS)
    save_eagle_head(random_head(models[0], "eagle"), tmp_path)
    other = tiny_model(num_layers=4, hidden_size=HIDDEN, vocab_size=100).model.config
    with pytest.raises(EagleLoadError, match="100"):
        load_eagle_head(str(tmp_path), other, NUM_LAYERS)
    wider = tiny_model(num_layers=4, hidden_size=64).model.config
    with pytest.raises(EagleLoadError, match="64"):
        load_eagle_head(str(tmp_path), wider, NUM_LAYERS)
    with pytest.raises(ValueError, match="drafter.path"):
        EagleDrafter.from_target(None, path="")


# -- lossless decoding --------------------------------------------------------------------------
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    layout=st.sampled_from(["eagle", "eagle3", "trained"]),
    tree=st.sampled_from([None, (2, 4), (3, 8), "static"]),
    skip=skip_sets(NUM_LAYERS),
    k=st.integers(1, 5),
    prompt=st.lists(st.integers(3, 200), min_size=1, max_size=24),
)
def test_eagle_output_equals_target_greedy(models, trained, layout, tree, skip, k, prompt):
    """Token for token the target's greedy output; a divergence only at a float near-tie of the
    target's two best logits (random tiny models have a few: tree verification sums in another order)."""
    target = models[0]
    head = trained[0] if layout == "trained" else random_head(target, layout)
    config = GenerationConfig(max_new_tokens=24, num_draft_tokens=k, stop_on_eos=False)
    spec = speculative_generate(target, prompt, drafter_for(target, head, tree), config, skip)
    assert_same_up_to_near_tie(list(spec.new_token_ids), *reference_greedy(target, prompt, skip, 24))
    assert sum(spec.accept_lengths) == len(spec.new_token_ids)


def test_trained_head_agrees_with_the_target_and_is_accepted(models, trained):
    """A random 4-layer target is hard to predict from one layer; training still lifts agreement
    and acceptance well above an untrained head's, and trees above chains."""
    head, summary, _ = trained
    agreement = [h["held_out_agreement"] for h in summary["history"]]
    assert agreement[-1] > max(0.05, agreement[0]), agreement
    target = models[0]
    config = GenerationConfig(max_new_tokens=32, num_draft_tokens=4, stop_on_eos=False)
    from specsparse.decoding.generation import encode_messages
    from specsparse.decoding.models import tiny_tokenizer

    prompts = [encode_messages(tiny_tokenizer(), f"count {i} {i + 1} {i + 2} and say more {i * 7}") for i in range(60, 66)]

    def mean_accept(head, tree=None):
        results = [speculative_generate(target, p, drafter_for(target, head, tree), config) for p in prompts]
        return sum(sum(r.accept_lengths) for r in results) / sum(len(r.accept_lengths) for r in results)

    untrained, chain, tree = mean_accept(random_head(target, "eagle")), mean_accept(head), mean_accept(head, (4, 12))
    assert chain > untrained + 0.03, (untrained, chain)
    assert tree > chain, (chain, tree)


@pytest.mark.parametrize("skip", [(), (0,), (1, 2)])
def test_each_first_draft_is_the_heads_prediction_from_the_committed_features(models, trained, skip):
    """Feature alignment: at every step the first draft is what the head predicts when run once,
    teacher-forced, over the (sparse) target's features of the whole committed context."""
    target, head = models[0], trained[0]
    proposals: list[tuple[int, int]] = []  # (context length, first draft)

    class Recording(EagleDrafter):
        def propose(self, k):
            proposal = super().propose(k)
            if proposal.tokens:
                proposals.append((len(self.context), proposal.tokens[0]))
            return proposal

    prompt = list(range(7, 27))
    config = GenerationConfig(max_new_tokens=32, num_draft_tokens=3, stop_on_eos=False)
    result = speculative_generate(target, prompt, Recording(head, target), config, skip)
    sequence = prompt + list(result.new_token_ids)
    session = ModelSession(target, skip, head.feature_layers)
    with torch.inference_mode():
        session.hidden_states(sequence)
        n = len(sequence) - 1
        states = head.fuse(session.features[:n])
        predicted = head(states[None], target.get_input_embeddings()(torch.tensor(sequence[1:]))[None],
                         torch.arange(n)[None])[0]
        logits = head.logits(predicted, own_or_target_head(head, target))
    assert len(proposals) >= 8
    for length, token in proposals:
        row = logits[length - 2]
        expected = int(row.argmax())  # the trained head drafts the full vocabulary
        top2 = row.topk(2).values
        assert token == expected or float(top2[0] - top2[1]) < 1e-4, (length, token, expected)


def test_training_replies_are_a_vocabulary_corpus(models, trained):
    """responses.jsonl holds each training sequence's reply as text: `vocab_corpus` reads it back."""
    from specsparse.data.corpus import load_responses
    from specsparse.decoding.models import tiny_tokenizer

    out = trained[2]
    records = json.loads((out / "data.json").read_text())["records"]
    expected = [tiny_tokenizer().decode(r["tokens"][r["prompt_length"]:], skip_special_tokens=True) for r in records]
    assert load_responses(str(out / "responses.jsonl")) == expected
    assert sum(len(text) for text in expected) > 0


def test_features_of_a_skipped_layer_are_the_stream_passing_it(models):
    """The stream entering layer l under a skip set equals that of the model with the skipped
    layers physically removed, at the kept layer it flows into."""
    from conftest import physically_removed

    target = models[0]
    ids = list(range(3, 20))
    session = ModelSession(target, (1, 2), (0, 1, 2, 3, FINAL_HIDDEN))
    session.hidden_states(ids)
    pruned = physically_removed(target, (1, 2))
    with torch.inference_mode():
        hf = pruned(torch.tensor([ids]), output_hidden_states=True).hidden_states
    width = target.config.hidden_size
    parts = session.features.split(width, dim=-1)
    torch.testing.assert_close(parts[0], hf[0][0])  # entering layer 0: the embeddings
    torch.testing.assert_close(parts[1], hf[1][0])  # entering 1 (skipped) = entering 2 (skipped) = entering 3
    torch.testing.assert_close(parts[2], hf[1][0])
    torch.testing.assert_close(parts[3], hf[1][0])
    torch.testing.assert_close(parts[4], hf[-1][0])  # final norm output


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tree=st.sampled_from([None, (3, 8), "static"]),
    skip=skip_sets(NUM_LAYERS),
    k=st.integers(1, 5),
    seeds=st.lists(st.integers(0, 40), min_size=1, max_size=3),
    max_new=st.integers(1, 24),
)
def test_replay_equals_the_engine_step_for_step(models, trained, tree, skip, k, seeds, max_new):
    """Replay feeds the drafter the target's features of the known continuation (one forward per
    sequence) instead of the verification forwards' features: same outputs, accept and verified
    lengths (the trained head's drafts are accepted often, so acceptance paths are exercised)."""
    from specsparse.decoding.batched import generate_batch
    from specsparse.decoding.generation import encode_messages
    from specsparse.decoding.models import tiny_tokenizer
    from specsparse.measuring.replay import replay

    target, head = models[0], trained[0]
    prompts = [encode_messages(tiny_tokenizer(), f"count {i} {i + 1} {i + 2} and say more {i * 7}") for i in seeds]
    config = GenerationConfig(max_new_tokens=max_new, num_draft_tokens=k)
    expected = [speculative_generate(target, p, drafter_for(target, head, tree), config, skip) for p in prompts]
    greedy = [r.new_token_ids for r in generate_batch(target, prompts, None, config, skip, (), 4)]
    replayed = replay(drafter_for(target, head, tree).replay_drafters(prompts, greedy, 4, skip), prompts, greedy, config)
    steps = lambda r: (r.new_token_ids, r.accept_lengths, r.verified_lengths)  # noqa: E731
    assert [steps(r) for r in replayed] == [steps(r) for r in expected]


# -- training -----------------------------------------------------------------------------------
def test_an_interrupted_training_resumes_to_the_same_head(models, tmp_path, monkeypatch):
    from specsparse.decoding.models import LoadedModel, tiny_tokenizer
    from specsparse.drafters.eagle import training as eagle_training

    target = LoadedModel(models[0], tiny_tokenizer(), {"name": "tiny-test"})
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"tell {i} things"}) + "\n" for i in range(12)))
    recipe = TrainingRecipe(prompts=str(prompts), max_new_tokens=12, epochs=3, batch_size=4, vocab_size=40)
    straight = train_eagle_head(target, tmp_path / "straight", recipe)

    real_epoch = eagle_training.Trainer.train_epoch
    calls = []

    def interrupted(self, data, bar):
        calls.append(self.epoch)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_epoch(self, data, bar)

    monkeypatch.setattr(eagle_training.Trainer, "train_epoch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_eagle_head(target, tmp_path / "resumed", recipe)
    assert (tmp_path / "resumed" / "resume.pt").is_file() and not (tmp_path / "resumed" / "config.json").exists()
    monkeypatch.setattr(eagle_training.Trainer, "train_epoch", real_epoch)
    resumed = train_eagle_head(target, tmp_path / "resumed", recipe)
    a = load_eagle_head(str(straight), models[0].config, NUM_LAYERS)
    b = load_eagle_head(str(resumed), models[0].config, NUM_LAYERS)
    assert a.draft_vocab_size == 40
    for name, tensor in a.state_dict().items():
        torch.testing.assert_close(tensor, b.state_dict()[name], rtol=0, atol=0, msg=name)
    history = json.loads((resumed / "training.json").read_text())["history"]
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert not (resumed / "resume.pt").exists()


@pytest.mark.parametrize("tree", [(2, 6), (3, 12), (4, 40), "static"])
def test_every_tree_node_is_a_top_k_child_of_its_path_run_as_a_chain(models, trained, tree):
    """The head's tree forward (mask, positions, cache order) against each node's ancestors run as
    a plain chain: a node's token is among the top_k tokens the head predicts after its path (a
    static tree's: exactly the token of its rank)."""
    target, head = models[0], trained[0]
    prompt = list(range(9, 40))
    session = ModelSession(target, (), head.feature_layers)
    session.hidden_states(prompt[:-1])
    drafter = drafter_for(target, head, tree)
    drafter.begin(prompt)
    drafter.observe_features(session.features)
    proposal = drafter.propose(4)
    assert len(proposal.tokens) > 1 and proposal.parents is not None
    if tree == "static":
        assert len(proposal.tokens) == len(STATIC)
    embed = target.get_input_embeddings()
    for node, token in enumerate(proposal.tokens):
        path = []
        parent = proposal.parents[node]
        while parent >= 0:
            path.insert(0, proposal.tokens[parent])
            parent = proposal.parents[parent]
        chain = drafter_for(target, head)
        chain.begin(prompt)
        chain.observe_features(session.features)
        with torch.inference_mode():
            state = chain._catch_up()
            for depth, step_token in enumerate(path):
                state = head(state[None, None], embed(torch.tensor([[step_token]])),
                             torch.tensor([[chain.done + depth]]), chain.cache)[0, -1]
            logits = head.logits(state, own_or_target_head(head, target))
        if tree == "static":
            assert token == int(logits.topk(3).indices[STATIC[node][-1]]), (node, path)
        else:
            top = logits.topk(tree[0]).indices.tolist()  # the trained head drafts the full vocabulary
            assert token in top, (node, path, token, top)


def test_the_cost_profile_times_real_eagle_drafts(models):
    """The drafter step time the cost profile stores runs the head on (random) features: drafts
    are proposed, so the time is the head's, not an empty step's."""
    from specsparse.measuring.pricing import _drafter_step_time

    drafted = []

    class Counting(EagleDrafter):
        def propose(self, k):
            proposal = super().propose(k)
            drafted.append(len(proposal.tokens))
            return proposal

    target = models[0]
    seconds = _drafter_step_time(Counting(random_head(target, "eagle"), target), target.config.vocab_size, repeats=4)
    assert seconds > 0 and drafted == [5] * 4
    assert EagleDrafter(random_head(target, "eagle"), target, (3, 8)).cost_key != \
        EagleDrafter(random_head(target, "eagle"), target).cost_key


@pytest.mark.parametrize("layout", ["eagle", "eagle3"])
def test_trimmed_eagle_chains_are_priced_per_head_row_from_one_timed_body(models, monkeypatch, layout):
    """A chain's modeled step is its body (timed once, whatever vocabulary came first) plus the profile's
    per-row LM-head time for each drafted token: monotone in k, never two timings of two moments. Trees
    keep one timing per vocabulary."""
    from specsparse.measuring import pricing as pricing_module
    from specsparse.measuring.profile_fit import CostProfile

    target = models[0]
    vocab = target.config.vocab_size
    timed, seconds = [], []
    real = pricing_module._drafter_step_time

    def spy(drafter, *args, **kwargs):
        timed.append(drafter.vocab_size)
        seconds.append(real(drafter, *args, **kwargs))
        return seconds[-1]

    monkeypatch.setattr(pricing_module, "_drafter_step_time", spy)
    profile = CostProfile({}, NUM_LAYERS, vocab, (1e-3, 1e-4), (2e-3, 1e-4, 0.0, 0.0), head_per_row=1e-6)
    head = random_head(target, layout)
    sizes = [vocab // 4, vocab, vocab // 2]  # a trimmed one first: the body does not depend on which
    steps = [pricing_module.draft_cost(EagleDrafter(head, target, vocab_ids=None if k == vocab else range(k)),
                                       profile).per_step for k in sizes]
    assert timed == [vocab // 4]  # one timing for every vocabulary
    assert steps[0] == pytest.approx(seconds[0], rel=1e-9)  # the timed vocabulary is priced at its timing
    for k, step in zip(sizes, steps):
        assert step == pytest.approx(steps[0] + 5 * 1e-6 * (k - sizes[0]), rel=1e-9)  # 5 drafted tokens each
    trees = [pricing_module.draft_cost(EagleDrafter(head, target, (2, 4), vocab_ids=range(k)), profile) for k in (10, 20)]
    assert timed == [vocab // 4, 10, 20] and all(t.per_step > 0 for t in trees)


def test_a_missing_checkpoint_with_a_recipe_is_trained_once(models, tmp_path, monkeypatch):
    """drafter=eagle with `train`: the first build trains a head under path, keyed by target and recipe;
    later builds load it; another recipe trains another head beside it."""
    from specsparse.decoding.models import LoadedModel, tiny_tokenizer
    from specsparse.drafters.eagle import training as eagle_training

    target = LoadedModel(models[0], tiny_tokenizer(), {"name": "tiny-test"})
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"say {i}"}) + "\n" for i in range(6)))
    recipe = {"prompts": str(prompts), "max_new_tokens": 8, "epochs": 1}
    first = EagleDrafter.from_target(target, path=str(tmp_path / "heads"), train=recipe)
    assert [p.parent.name for p in (tmp_path / "heads").glob("*/model.safetensors")] == [
        eagle_training.trained_head(target, tmp_path / "heads", TrainingRecipe(**recipe)).name]
    monkeypatch.setattr(eagle_training, "train_eagle_head", lambda *a, **k: pytest.fail("trained twice"))
    second = EagleDrafter.from_target(target, path=str(tmp_path / "heads"), train=recipe)
    assert second.head is first.head  # loaded once per process
    with pytest.raises(pytest.fail.Exception, match="trained twice"):  # another recipe is another head
        EagleDrafter.from_target(target, path=str(tmp_path / "heads"), train={**recipe, "epochs": 2})


def test_heads_trained_on_the_same_replies_generate_them_once(models, tmp_path, monkeypatch):
    """The full head and a head trained at k (another recipe, same replies) share the generated data:
    the second training generates nothing, also for a recipe whose fields JSON turns into lists."""
    from specsparse.decoding.models import LoadedModel, tiny_tokenizer
    from specsparse.drafters.eagle import training as eagle_training

    target = LoadedModel(models[0], tiny_tokenizer(), {"name": "tiny-test"})
    recipe = {"prompts": "builtin", "domains": ["qa"], "prompts_per_set": 10, "max_new_tokens": 6, "epochs": 1}
    EagleDrafter.from_target(target, path=str(tmp_path / "heads"), train=recipe)
    monkeypatch.setattr(eagle_training, "generate_data", lambda *a, **k: pytest.fail("replies generated twice"))
    EagleDrafter.from_target(target, path=str(tmp_path / "heads"), train={**recipe, "vocab_size": 40})
    assert len(list((tmp_path / "heads").glob("*/config.json"))) == 2


@pytest.mark.parametrize("layout", ["trained", "eagle3"])
def test_a_trimmed_vocabulary_drafts_only_its_tokens_and_stays_lossless(models, trained, layout):
    """search=tpe_vocab hands a full-vocabulary head `vocab_ids`: it drafts through those rows of the
    LM head it drafts with (the target's for EAGLE-1/2, its own for EAGLE-3); a head trained with a
    trimmed vocabulary of its own refuses."""
    target = models[0]
    head = trained[0] if layout == "trained" else random_head(target, "eagle3")
    kept = list(range(0, target.config.vocab_size, 2))
    drafted = []

    class Recording(EagleDrafter):
        def propose(self, k):
            proposal = super().propose(k)
            drafted.extend(proposal.tokens)
            return proposal

    config = GenerationConfig(max_new_tokens=24, num_draft_tokens=4, stop_on_eos=False)
    prompt = list(range(11, 31))
    spec = speculative_generate(target, prompt, Recording(head, target, vocab_ids=kept), config)
    assert spec.new_token_ids == speculative_generate(target, prompt, None, config).new_token_ids
    assert drafted and set(drafted) <= set(kept)
    assert Recording(head, target, vocab_ids=kept).head_shape()[0] == target.config.vocab_size
    with pytest.raises(ValueError, match="trimmed vocabulary"):
        EagleDrafter(random_head(target, layout.replace("trained", "eagle"), trimmed=True), target, vocab_ids=kept)


def test_an_eagle3_head_trains_with_training_time_test_and_round_trips_the_official_layout(models, tmp_path):
    """`train-drafter --arch eagle3` on the tiny target: fused low/middle/high features, its own LM
    head over a trimmed draft vocabulary (d2t/t2d), every training-time-test step's loss falling;
    `export --eagle-head` writes the official layout, which loads back to the same tensors and drafts
    losslessly. (A random tiny target's next token is near uniform: how well a head learns is measured
    on the embedded model, experiments/paper_vocab.)"""
    from specsparse.cli import main
    from specsparse.decoding.models import LoadedModel, tiny_tokenizer

    target = LoadedModel(models[0], tiny_tokenizer(), {"name": "tiny-test"})
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"count {i} {i + 1} {i + 2} and say more {i * 7}"}) + "\n"
                               for i in range(48)))
    out = train_eagle_head(target, tmp_path / "head3", TrainingRecipe(
        prompts=str(prompts), max_new_tokens=48, epochs=12, learning_rate=1e-2, batch_size=4, target_top_k=64,
        arch="eagle3", ttt_steps=3, vocab_size=160))
    history = json.loads((out / "training.json").read_text())["history"]
    for step in range(3):
        assert history[-1][f"token_loss_step{step}"] < history[0][f"token_loss_step{step}"], step
    head = load_eagle_head(str(out), models[0].config, NUM_LAYERS)
    assert head.layout == "eagle3" and head.feature_layers == eagle3_feature_layers(NUM_LAYERS)
    assert head.draft_vocab_size == 160 and head.lm_head.weight.shape[0] == 160

    assert main(["export", "--eagle-head", str(out), "--output", str(tmp_path / "official")]) == 0
    from safetensors.torch import load_file

    config = json.loads((tmp_path / "official" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["draft_vocab_size"] == 160
    keys = set(load_file(str(tmp_path / "official" / "model.safetensors")))
    assert {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"} <= keys
    assert any(k.startswith("midlayer.self_attn.q_proj") for k in keys)
    exported = load_eagle_head(str(tmp_path / "official"), models[0].config, NUM_LAYERS)
    for name, tensor in head.state_dict().items():
        assert torch.equal(tensor, exported.state_dict()[name]), name
    assert main(["export", "--eagle-head", str(out), "--output", str(tmp_path / "official")]) == 2  # not empty
    model = models[0]
    config = GenerationConfig(max_new_tokens=24, num_draft_tokens=4, stop_on_eos=False)
    for i in (100, 200):
        prompt = target.tokenizer(f"count {i} {i + 1} {i + 2} and say more").input_ids
        spec = speculative_generate(model, prompt, EagleDrafter(exported.eval(), model), config)
        assert spec.new_token_ids == speculative_generate(model, prompt, None, config).new_token_ids


@given(seed=st.integers(0, 10_000), length=st.integers(4, 14), steps=st.integers(1, 4))
@settings(max_examples=12, deadline=None)
def test_training_time_test_equals_drafting_along_the_real_continuation(models, seed, length, steps):
    """Step s of EAGLE-3's training-time test at column j, computed for all columns at once with its
    block mask, equals what the drafter computes: the context's target features up to position j in
    the head cache, then s drafted steps fed the real next tokens, each reading the last output."""
    from specsparse.decoding.session import ModelSession
    from specsparse.decoding.skipping import SkipAwareCache
    from specsparse.drafters.eagle.training import ttt_outputs

    target = models[0]
    head = random_head(target, "eagle3", seed=seed % 7)
    tokens = torch.randint(3, target.config.vocab_size, (length,), generator=torch.Generator().manual_seed(seed))
    session = ModelSession(target, (), head.feature_layers)
    with torch.no_grad():
        session.hidden_states(tokens.tolist())
        features = session.features.float()
        width = length - 1
        padded = torch.cat([tokens[1:], torch.zeros(steps, dtype=torch.long)])
        embed = lambda ids: target.get_input_embeddings()(ids)  # noqa: E731
        outputs = list(ttt_outputs(head, embed, features[None, :width], padded[None],
                                   torch.arange(width)[None], steps))
        for j in range(width):
            cache = SkipAwareCache(head.config)
            hidden = head(head.fuse(features[: j + 1])[None], embed(tokens[1 : j + 2])[None],
                          torch.arange(j + 1)[None], cache)[0, -1]
            torch.testing.assert_close(outputs[0][0, j], hidden, atol=1e-4, rtol=1e-4)
            for step in range(1, steps):
                if j + 1 + step >= length:
                    break
                hidden = head(hidden[None, None], embed(tokens[j + 1 + step : j + 2 + step])[None],
                              torch.tensor([[j + step]]), cache)[0, -1]
                torch.testing.assert_close(outputs[step][0, j], hidden, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("layout", ["eagle", "eagle3"])
def test_eagle_on_the_embedded_model_is_lossless(smollm, layout):
    """SmolLM2-135M float32 with an (untrained) head of each layout: EAGLE-3's fused layers of the
    real 30-layer model under a skip set with layer 0, chains and trees, equal the greedy output."""
    from specsparse.decoding.generation import encode_messages
    from specsparse.drafters.eagle.head import head_config as target_head_config

    model = smollm.model
    torch.manual_seed(0)
    layers = (FINAL_HIDDEN,) if layout == "eagle" else eagle3_feature_layers(model.config.num_hidden_layers)
    head = EagleHead(target_head_config(model.config), layout, layers, model.config.hidden_size).eval()
    config = GenerationConfig(max_new_tokens=12, num_draft_tokens=3)
    for text, skip, tree in (("Translate German to English: Guten Morgen.", (0, 7), None),
                             ("What is the capital of France?", (), (3, 8))):
        prompt = encode_messages(smollm.tokenizer, text)
        plain = speculative_generate(model, prompt, None, config, skip, smollm.eos_token_ids)
        spec = speculative_generate(model, prompt, EagleDrafter(head, model, tree), config, skip, smollm.eos_token_ids)
        assert spec.new_token_ids == plain.new_token_ids


def own_or_target_head(head, target):
    """The LM head a full-vocabulary EAGLE head drafts with: its own (EAGLE-3) or the target's."""
    return None if head.layout == "eagle3" else target.get_output_embeddings()
