// TEST FIXTURE: not NVIDIA's nvbandwidth. It takes nvbandwidth's -j and -t options and prints
// its JSON layout (README.md here), with every asked testcase "Waived": it measures nothing.
#include <boost/program_options.hpp>
#include <cuda_runtime.h>
#include <iostream>
#include <string>
#include <vector>

__global__ void touch(int *flag) { *flag = 1; }  // device code, so that the build needs nvcc

int main(int argc, char **argv) {
    namespace po = boost::program_options;
    std::vector<std::string> testcases;
    bool json = false;
    po::options_description options("nvbandwidth stand-in (TEST FIXTURE)");
    options.add_options()
        ("help,h", "Produce help message")
        ("testcase,t", po::value<std::vector<std::string>>(&testcases)->multitoken(), "Testcase(s)")
        ("json,j", po::bool_switch(&json), "Print output in json format instead of plain text.");
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, options), vm);
    po::notify(vm);
    if (vm.count("help")) {
        std::cout << options << std::endl;
        return 0;
    }
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    if (!json) {
        std::cout << "nvbandwidth stand-in (TEST FIXTURE), CUDA Runtime Version: " << runtime << std::endl;
        return 0;
    }
    std::cout << "{\n  \"nvbandwidth\": {\n    \"CUDA Runtime Version\": " << runtime
              << ",\n    \"Driver Version\": \"N/A\",\n    \"git_version\": \"\",\n"
              << "    \"version\": \"standin\",\n    \"testcases\": [";
    for (size_t i = 0; i < testcases.size(); ++i) {
        std::cout << (i ? "," : "") << "\n      {\"name\": \"" << testcases[i]
                  << "\", \"status\": \"Waived\", \"error\": \"TEST FIXTURE: measures nothing\"}";
    }
    std::cout << "\n    ]\n  }\n}" << std::endl;
    return 0;
}
