// Part of tools/golden (see README.md): llama.cpp's tokenization of test cases, for the gpt-4o goldens.
// Tokenizes every case of a .inp file (llama.cpp's test format) with a vocabulary-only GGUF and
// prints the .out format (add_special false, parse_special false).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include "llama.h"
int main(int argc, char** argv) {
  if (argc != 3) return 2;
  llama_backend_init();
  auto mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* m = llama_model_load_from_file(argv[1], mp);
  if (!m) return 1;
  const llama_vocab* v = llama_model_get_vocab(m);
  std::ifstream f(argv[2], std::ios::binary);
  std::stringstream ss; ss << f.rdbuf();
  const std::string inp = ss.str(), sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0;
  while (true) {
    const size_t e = inp.find(sep, pos);
    if (e == std::string::npos) break;
    const std::string c = inp.substr(pos, e - pos);
    std::vector<llama_token> t(c.size() + 16);
    const int n = llama_tokenize(v, c.data(), int(c.size()), t.data(), int(t.size()), false, false);
    for (int i = 0; i < n; ++i) printf(" %d", t[i]);
    printf("\n");
    pos = e + sep.size();
  }
  llama_model_free(m);
  return 0;
}
